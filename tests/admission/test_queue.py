"""The one shared queue: FIFO, bound, TTL, withdrawal, priority classes and head-of-line order.

Also: work goes to whichever pod frees a slot first, a smaller request never overtakes a head
that waits for KV room, a head bound to other pods by its subset hint does not block a pod it
cannot use, and queued requests no pod can serve any more are refused.
"""

from __future__ import annotations

from trimtab.admission import AdmissionSettings, Queued, Refusal, RefusalReason, RequestId

from .builders import address, admission, ask, granted, in_flight, pod


def fill(admitted: object, count: int, *, prefix: str = "f") -> None:
    for i in range(count):
        granted(admitted.ask(ask=ask(f"{prefix}{i}"), now=0.5))  # type: ignore[attr-defined]


def test_queued_requests_are_served_first_in_first_out() -> None:
    admitted = admission(pod(0, cap=1))
    fill(admitted, 1)
    positions = [admitted.ask(ask=ask(id), now=1.0) for id in "abc"]
    assert positions == [Queued(id=RequestId(id), position=n) for n, id in enumerate("abc")]
    order = []
    for id in ["f0", "a", "b"]:
        order += [g.id for g in admitted.release(id=RequestId(id), now=2.0)]
    assert order == ["a", "b", "c"]


def test_work_goes_to_the_pod_that_frees_a_slot_first() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    fill(admitted, 2)
    admitted.ask(ask=ask("a"), now=1.0)
    [grant] = admitted.release(id=RequestId("f1"), now=2.0)
    assert (grant.id, grant.pod) == ("a", "pod-1")


def test_a_full_queue_refuses_with_retry_after() -> None:
    admitted = admission(pod(0, cap=1), queue_length=2, retry_after_s=3.0)
    fill(admitted, 1)
    admitted.ask(ask=ask("a"), now=1.0)
    admitted.ask(ask=ask("b"), now=1.0)
    refusal = admitted.ask(ask=ask("c"), now=1.0)
    assert refusal == Refusal(
        id=RequestId("c"), reason=RefusalReason.QUEUE_FULL, status=429, retry_after_s=3.0
    )


def test_queue_length_zero_refuses_instead_of_queueing() -> None:
    admitted = admission(pod(0, cap=1), queue_length=0)
    fill(admitted, 1)
    refusal = admitted.ask(ask=ask("a"), now=1.0)
    assert isinstance(refusal, Refusal)
    assert refusal.reason is RefusalReason.QUEUE_FULL


def test_a_request_that_waited_the_ttl_is_shed() -> None:
    admitted = admission(pod(0, cap=1), queue_ttl_s=5.0, retry_after_s=2.0)
    fill(admitted, 1)
    admitted.ask(ask=ask("a"), now=1.0)
    admitted.ask(ask=ask("b"), now=3.0)
    assert admitted.next_deadline() == 6.0
    assert admitted.expire(now=5.9) == []
    assert admitted.expire(now=6.0) == [
        Refusal(
            id=RequestId("a"), reason=RefusalReason.QUEUE_TIMEOUT, status=429, retry_after_s=2.0
        )
    ]
    assert admitted.next_deadline() == 8.0
    assert [r.id for r in admitted.expire(now=100.0)] == ["b"]
    assert admitted.next_deadline() is None
    assert admitted.release(id=RequestId("f0"), now=101.0) == []


def test_withdrawn_requests_leave_the_queue() -> None:
    admitted = admission(pod(0, cap=1))
    fill(admitted, 1)
    admitted.ask(ask=ask("a"), now=1.0)
    admitted.ask(ask=ask("b"), now=1.0)
    admitted.withdraw(id=RequestId("a"))
    admitted.withdraw(id=RequestId("a"))
    admitted.withdraw(id=RequestId("f0"))  # granted: withdraw touches only the queue
    assert in_flight(admitted) == {"pod-0": 1}
    [grant] = admitted.release(id=RequestId("f0"), now=2.0)
    assert grant.id == "b"
    assert admitted.stats().withdrawn == 1


def test_releasing_a_queued_request_withdraws_it() -> None:
    admitted = admission(pod(0, cap=1))
    fill(admitted, 1)
    admitted.ask(ask=ask("a"), now=1.0)
    assert admitted.release(id=RequestId("a"), now=2.0) == []
    stats = admitted.stats()
    assert (stats.queue_length, stats.withdrawn, stats.released) == (0, 1, 0)


def test_a_lower_priority_number_is_served_first_and_fifo_inside_a_class() -> None:
    admitted = admission(pod(0, cap=1), priority_classes=3)
    fill(admitted, 1)
    for id, priority in [("low1", 2), ("mid1", 1), ("high1", 0), ("mid2", 1), ("high2", 0)]:
        admitted.ask(ask=ask(id, priority=priority), now=1.0)
    assert admitted.ask(ask=ask("low2", priority=9), now=1.0) == Queued(
        id=RequestId("low2"), position=5
    )
    assert admitted.stats().queued_by_priority == (2, 2, 2)
    order, last = [], "f0"
    for _ in range(6):
        [grant] = admitted.release(id=RequestId(last), now=2.0)
        order.append(last := grant.id)
    assert order == ["high1", "high2", "mid1", "mid2", "low1", "low2"]


def test_a_higher_priority_newcomer_goes_before_the_waiting_ones() -> None:
    kv = {"kv_usage": 0.0, "kv_observed_at": 0.0, "kv_capacity_tokens": 10_000}
    admitted = admission(pod(0, cap=4, **kv), priority_classes=2, expected_output_tokens=0)
    granted(admitted.ask(ask=ask("a", tokens=5000), now=1.0))
    assert isinstance(admitted.ask(ask=ask("big", tokens=5000, priority=1), now=1.0), Queued)
    granted(admitted.ask(ask=ask("urgent", tokens=100, priority=0), now=1.0))


def test_a_smaller_request_never_overtakes_the_head() -> None:
    kv = {"kv_usage": 0.0, "kv_observed_at": 0.0, "kv_capacity_tokens": 10_000}
    admitted = admission(pod(0, cap=4, **kv), expected_output_tokens=0)
    granted(admitted.ask(ask=ask("a", tokens=5000), now=1.0))
    granted(admitted.ask(ask=ask("b", tokens=3000), now=1.0))
    assert isinstance(admitted.ask(ask=ask("big", tokens=4000), now=1.0), Queued)
    assert isinstance(admitted.ask(ask=ask("small", tokens=10), now=1.0), Queued)
    assert admitted.release(id=RequestId("b"), now=2.0) == []  # 5,000 + 4,000 >= 9,000
    grants = admitted.release(id=RequestId("a"), now=3.0)
    assert [g.id for g in grants] == ["big", "small"]


def test_a_head_bound_elsewhere_does_not_block_other_pods() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    fill(admitted, 2)
    admitted.ask(ask=ask("only0", subset=frozenset({address(0)})), now=1.0)
    admitted.ask(ask=ask("any"), now=1.0)
    [grant] = admitted.release(id=RequestId("f1"), now=2.0)  # f1 ran on pod-1
    assert (grant.id, grant.pod) == ("any", "pod-1")
    admitted.ask(ask=ask("any2"), now=2.0)
    [grant] = admitted.release(id=RequestId("f0"), now=3.0)
    assert (grant.id, grant.pod) == ("only0", "pod-0")


def test_a_newcomer_does_not_take_a_pod_a_waiting_request_needs() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    granted(admitted.ask(ask=ask("a", subset=frozenset({address(0)})), now=1.0))
    admitted.ask(ask=ask("b", subset=frozenset({address(0)})), now=1.0)
    assert granted(admitted.ask(ask=ask("c"), now=1.0)).pod == "pod-1"
    admitted.release(id=RequestId("c"), now=2.0)
    # Both pods would do for "d": it must leave pod-0 to "b" (which waits for it) and take pod-1.
    assert granted(admitted.ask(ask=ask("d"), now=2.0)).pod == "pod-1"


def test_dispatch_after_the_head_is_withdrawn() -> None:
    kv = {"kv_usage": 0.0, "kv_observed_at": 0.0, "kv_capacity_tokens": 10_000}
    admitted = admission(pod(0, cap=4, **kv), expected_output_tokens=0)
    granted(admitted.ask(ask=ask("a", tokens=5000), now=1.0))
    admitted.ask(ask=ask("big", tokens=5000), now=1.0)
    admitted.ask(ask=ask("small", tokens=10), now=1.0)
    admitted.withdraw(id=RequestId("big"))
    assert [g.id for g in admitted.dispatch(now=2.0)] == ["small"]


def test_losing_every_pod_refuses_the_queue() -> None:
    admitted = admission(pod(0, cap=1))
    fill(admitted, 1)
    admitted.ask(ask=ask("a"), now=1.0)
    [refusal] = admitted.set_pods(pods=[], now=2.0)
    assert isinstance(refusal, Refusal)
    assert (refusal.id, refusal.reason, refusal.status) == ("a", RefusalReason.NO_ENDPOINT, 503)


def test_losing_the_pods_of_a_subset_refuses_those_requests() -> None:
    admitted = admission(pod(0, cap=1), pod(1, cap=1))
    fill(admitted, 2)
    admitted.ask(ask=ask("only0", subset=frozenset({address(0)})), now=1.0)
    admitted.ask(ask=ask("any"), now=1.0)
    [refusal] = admitted.set_pods(pods=[pod(1, cap=1)], now=2.0)
    assert refusal.id == "only0"
    assert admitted.stats().queue_length == 1


def test_a_shorter_queue_refuses_its_newest_requests() -> None:
    admitted = admission(pod(0, cap=1), queue_length=5)
    fill(admitted, 1)
    for id in "abcd":
        admitted.ask(ask=ask(id), now=1.0)
    refusals = admitted.configure(settings=AdmissionSettings(queue_length=2), now=2.0)
    assert [(r.id, r.reason) for r in refusals if isinstance(r, Refusal)] == [
        ("d", RefusalReason.QUEUE_FULL),
        ("c", RefusalReason.QUEUE_FULL),
    ]
    assert admitted.stats().queue_length == 2


def test_fewer_priority_classes_merge_in_arrival_order() -> None:
    admitted = admission(pod(0, cap=1), priority_classes=3)
    fill(admitted, 1)
    for id, priority in [("a", 2), ("b", 1), ("c", 0), ("d", 2)]:
        admitted.ask(ask=ask(id, priority=priority), now=1.0)
    admitted.configure(settings=AdmissionSettings(priority_classes=2), now=1.5)
    assert admitted.stats().queued_by_priority == (1, 3)
    order, last = [], "f0"
    for _ in range(4):
        [grant] = admitted.release(id=RequestId(last), now=2.0)
        order.append(last := grant.id)
    assert order == ["c", "a", "b", "d"]


def test_stats_count_every_outcome() -> None:
    admitted = admission(pod(0, cap=1), queue_length=1, queue_ttl_s=1.0)
    fill(admitted, 1)
    admitted.ask(ask=ask("a"), now=1.0)
    admitted.ask(ask=ask("b"), now=1.0)
    admitted.expire(now=5.0)
    stats = admitted.stats()
    assert (stats.asked, stats.granted, stats.queued, stats.refused_total) == (3, 1, 1, 2)
    assert stats.refused[RefusalReason.QUEUE_FULL] == 1
    assert stats.refused[RefusalReason.QUEUE_TIMEOUT] == 1
