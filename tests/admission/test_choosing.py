"""Which pod a request gets, its fallbacks, and the subset hint.

Fewest in-flight per unit of speed first; ties go to the most KV headroom, then the name.
Fallbacks are the next admissible pods with room, best first, at most ``max_fallbacks``.
"""

from __future__ import annotations

from typing import Any

from trimtab.admission import Queued, Refusal, RefusalReason, RequestId
from trimtab.api.records import PodName

from .builders import address, admission, ask, granted, pod


def test_fewest_in_flight_first() -> None:
    admitted = admission(pod(0), pod(1), pod(2))
    picks = [granted(admitted.ask(ask=ask(str(i)), now=1.0)).pod for i in range(6)]
    assert picks == ["pod-0", "pod-1", "pod-2", "pod-0", "pod-1", "pod-2"]


def test_in_flight_is_counted_per_unit_of_speed() -> None:
    admitted = admission(pod(0, cap=10, speed=2.0), pod(1, cap=10))
    picks = [granted(admitted.ask(ask=ask(str(i)), now=1.0)).pod for i in range(6)]
    assert picks.count(PodName("pod-0")) == 4
    assert picks.count(PodName("pod-1")) == 2


def test_ties_go_to_the_most_kv_headroom() -> None:
    kv: dict[str, Any] = {"kv_observed_at": 0.0, "kv_capacity_tokens": 100_000}
    admitted = admission(pod(0, kv_usage=0.5, **kv), pod(1, kv_usage=0.1, **kv), pod(2))
    assert granted(admitted.ask(ask=ask("a"), now=1.0)).pod == "pod-2"
    assert granted(admitted.ask(ask=ask("b"), now=1.0)).pod == "pod-1"
    assert granted(admitted.ask(ask=ask("c"), now=1.0)).pod == "pod-0"


def test_ties_of_headroom_go_to_the_name() -> None:
    admitted = admission(pod(2), pod(1), pod(3))
    assert granted(admitted.ask(ask=ask("a"), now=1.0)).pod == "pod-1"


def test_fallbacks_are_the_next_best_pods_at_most_three() -> None:
    admitted = admission(*(pod(n) for n in range(6)))
    for n in range(5, 1, -1):
        granted(admitted.ask(ask=ask(f"x{n}", subset=frozenset({address(n)})), now=1.0))
    grant = granted(admitted.ask(ask=ask("a"), now=1.0))
    assert grant.address == address(0)
    assert grant.fallbacks == (address(1), address(2), address(3))


def test_fallbacks_can_be_turned_off() -> None:
    admitted = admission(pod(0), pod(1), max_fallbacks=0)
    assert granted(admitted.ask(ask=ask("a"), now=1.0)).fallbacks == ()


def test_fallbacks_skip_pods_without_room() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1), pod(2, accepting=False), pod(3))
    granted(admitted.ask(ask=ask("a", subset=frozenset({address(1)})), now=1.0))
    grant = granted(admitted.ask(ask=ask("b"), now=1.0))
    assert grant.pod == "pod-0"
    assert grant.fallbacks == (address(3),)


def test_no_fallbacks_when_no_other_pod_has_room() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    assert granted(admitted.ask(ask=ask("b"), now=1.0)).fallbacks == ()


def test_the_subset_hint_restricts_the_pods() -> None:
    admitted = admission(pod(0), pod(1), pod(2))
    subset = frozenset({address(2), "10.9.9.9:1"})
    grant = granted(admitted.ask(ask=ask("a", subset=subset), now=1.0))
    assert (grant.pod, grant.fallbacks) == ("pod-2", ())


def test_a_subset_matching_no_pod_is_refused_at_once() -> None:
    admitted = admission(pod(0))
    refusal = admitted.ask(ask=ask("a", subset=frozenset({"10.9.9.9:1"})), now=1.0)
    assert isinstance(refusal, Refusal)
    assert (refusal.reason, refusal.status) == (RefusalReason.NO_ENDPOINT, 503)
    empty = admitted.ask(ask=ask("b", subset=frozenset()), now=1.0)
    assert isinstance(empty, Refusal)
    assert empty.reason is RefusalReason.NO_ENDPOINT
    assert admitted.stats().queue_length == 0


def test_a_subset_whose_pods_are_full_waits() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    only_0 = frozenset({address(0)})
    granted(admitted.ask(ask=ask("a", subset=only_0), now=1.0))
    assert isinstance(admitted.ask(ask=ask("b", subset=only_0), now=1.0), Queued)
    [grant] = admitted.release(id=RequestId("a"), now=2.0)
    assert (grant.id, grant.pod) == ("b", "pod-0")


def test_a_thousand_pods_are_all_used_before_any_twice() -> None:
    admitted = admission(*(pod(n, cap=2) for n in range(1000)))
    picks = {str(i): granted(admitted.ask(ask=ask(str(i)), now=1.0)).pod for i in range(1000)}
    assert len(set(picks.values())) == 1000
    admitted.release(id=RequestId("500"), now=2.0)
    assert granted(admitted.ask(ask=ask("again"), now=2.0)).pod == picks["500"]
