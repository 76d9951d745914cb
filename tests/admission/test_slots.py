"""Per-pod in-flight slots: taken at grant, released exactly once, never above the cap.

Covers idempotent release, unknown ids, cap 0, draining pods, cap changes, pods leaving and
returning, duplicated pods and repeated asks.
"""

from __future__ import annotations

from trimtab.admission import Grant, PodCapacity, Queued, RefusalReason, RequestId
from trimtab.api.records import PodName

from .builders import address, admission, ask, granted, in_flight, pod


def test_grant_takes_a_slot_and_release_frees_it() -> None:
    admitted = admission(pod(0, cap=2))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    assert in_flight(admitted) == {"pod-0": 1}
    assert admitted.release(id=RequestId("a"), now=2.0) == []
    assert in_flight(admitted) == {"pod-0": 0}


def test_release_is_idempotent() -> None:
    admitted = admission(pod(0, cap=2))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    granted(admitted.ask(ask=ask("b"), now=1.0))
    admitted.release(id=RequestId("a"), now=2.0)
    admitted.release(id=RequestId("a"), now=3.0)
    assert in_flight(admitted) == {"pod-0": 1}
    assert admitted.stats().released == 1


def test_release_of_an_unknown_id_does_nothing() -> None:
    admitted = admission(pod(0, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    assert admitted.release(id=RequestId("nobody"), now=2.0) == []
    assert in_flight(admitted) == {"pod-0": 1}


def test_a_full_pod_queues_the_next_request() -> None:
    admitted = admission(pod(0, cap=2))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    granted(admitted.ask(ask=ask("b"), now=1.0))
    assert admitted.ask(ask=ask("c"), now=1.0) == Queued(id=RequestId("c"), position=0)
    assert in_flight(admitted) == {"pod-0": 2}


def test_a_released_slot_goes_to_the_queue() -> None:
    admitted = admission(pod(0, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    admitted.ask(ask=ask("b"), now=1.0)
    [grant] = admitted.release(id=RequestId("a"), now=2.0)
    assert (grant.id, grant.pod) == ("b", "pod-0")
    assert in_flight(admitted) == {"pod-0": 1}


def test_a_pod_with_cap_zero_takes_nothing() -> None:
    admitted = admission(pod(0, cap=0))
    assert isinstance(admitted.ask(ask=ask("a"), now=1.0), Queued)


def test_a_pod_not_accepting_takes_no_new_work_until_it_recovers() -> None:
    admitted = admission(pod(0, cap=4), pod(1, cap=4))
    first = granted(admitted.ask(ask=ask("a"), now=1.0))
    assert first.pod == "pod-0"
    admitted.set_pods(pods=[pod(0, cap=4, accepting=False), pod(1, cap=4)], now=2.0)
    assert granted(admitted.ask(ask=ask("b"), now=2.0)).pod == "pod-1"
    assert granted(admitted.ask(ask=ask("c"), now=2.0)).fallbacks == ()
    admitted.set_pods(pods=[pod(0, accepting=False), pod(1, accepting=False)], now=3.0)
    assert isinstance(admitted.ask(ask=ask("d"), now=3.0), Queued)
    assert admitted.release(id=RequestId("a"), now=4.0) == []
    [grant] = admitted.set_pods(pods=[pod(0), pod(1, accepting=False)], now=5.0)
    assert grant == Grant(id=RequestId("d"), pod=PodName("pod-0"), address=address(0), fallbacks=())


def test_a_bigger_cap_serves_the_queue() -> None:
    admitted = admission(pod(0, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    admitted.ask(ask=ask("b"), now=1.0)
    admitted.ask(ask=ask("c"), now=1.0)
    grants = admitted.set_pods(pods=[pod(0, cap=3)], now=2.0)
    assert [g.id for g in grants] == ["b", "c"]
    assert in_flight(admitted) == {"pod-0": 3}


def test_a_cap_lowered_below_in_flight_admits_nothing_until_below_it() -> None:
    admitted = admission(pod(0, cap=3))
    for id in "abc":
        granted(admitted.ask(ask=ask(id), now=1.0))
    admitted.set_pods(pods=[pod(0, cap=1)], now=2.0)
    admitted.ask(ask=ask("d"), now=2.0)
    assert admitted.release(id=RequestId("a"), now=3.0) == []
    assert admitted.release(id=RequestId("b"), now=3.0) == []
    [grant] = admitted.release(id=RequestId("c"), now=3.0)
    assert grant.id == "d"


def test_a_removed_pod_forgets_its_requests() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    admitted.set_pods(pods=[pod(1, cap=1)], now=2.0)
    assert admitted.release(id=RequestId("a"), now=3.0) == []
    stats = admitted.stats()
    assert (stats.forgotten, stats.released) == (1, 0)
    admitted.set_pods(pods=[pod(0, cap=1), pod(1, cap=1)], now=4.0)
    assert in_flight(admitted) == {"pod-0": 0, "pod-1": 0}


def test_in_flight_follows_the_pod_name_across_updates() -> None:
    admitted = admission(pod(0, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    admitted.set_pods(pods=[pod(0, cap=1, speed=2.0)], now=2.0)
    assert isinstance(admitted.ask(ask=ask("b"), now=2.0), Queued)


def test_asking_twice_returns_the_first_answer() -> None:
    admitted = admission(pod(0, cap=1))
    first = admitted.ask(ask=ask("a"), now=1.0)
    assert admitted.ask(ask=ask("a"), now=1.5) == first
    admitted.ask(ask=ask("b"), now=2.0)
    assert admitted.ask(ask=ask("b"), now=2.5) == Queued(id=RequestId("b"), position=0)
    stats = admitted.stats()
    assert (stats.asked, stats.granted, stats.queued) == (2, 1, 1)
    assert in_flight(admitted) == {"pod-0": 1}


def test_duplicate_names_and_addresses_keep_the_first() -> None:
    admitted = admission(pod(0, cap=1), pod(0, cap=9), pod(1))
    assert [(p.name, p.cap) for p in admitted.stats().pods] == [("pod-0", 1), ("pod-1", 4)]
    twin = PodCapacity(name=PodName("twin"), address=address(0), cap=5)
    admitted.set_pods(pods=[pod(0), twin], now=1.0)
    assert [p.name for p in admitted.stats().pods] == ["pod-0"]


def test_no_pod_at_all_is_refused_at_once() -> None:
    admitted = admission()
    refusal = admitted.ask(ask=ask("a"), now=1.0)
    assert not isinstance(refusal, Grant | Queued)
    assert (refusal.reason, refusal.status, refusal.retry_after_s) == (
        RefusalReason.NO_ENDPOINT,
        503,
        None,
    )
    assert admitted.stats().queue_length == 0


def test_a_request_served_elsewhere_moves_its_slot() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    admitted.ask(ask=ask("b", subset=frozenset({address(0)})), now=1.0)
    [grant] = admitted.moved(id=RequestId("a"), address=address(1), now=2.0)
    assert (grant.id, grant.pod) == ("b", "pod-0")
    assert in_flight(admitted) == {"pod-0": 1, "pod-1": 1}
    assert admitted.ask(ask=ask("a"), now=2.0) == Grant(
        id=RequestId("a"), pod=PodName("pod-1"), address=address(1), fallbacks=()
    )
    assert admitted.release(id=RequestId("a"), now=3.0) == []
    assert in_flight(admitted) == {"pod-0": 1, "pod-1": 0}


def test_moving_to_the_same_or_an_unknown_pod_changes_nothing() -> None:
    admitted = admission(pod(0, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    assert admitted.moved(id=RequestId("a"), address=address(0), now=2.0) == []
    assert admitted.moved(id=RequestId("a"), address="10.9.9.9:1", now=2.0) == []
    assert admitted.moved(id=RequestId("x"), address=address(0), now=2.0) == []
    assert in_flight(admitted) == {"pod-0": 1}
