"""The KV-token budget: the larger of (snapshot + footprints granted since - tokens released
since) and the footprints of everything in flight, under
``kv_limit``; fresh snapshots only (stale or missing KV fails open to the count cap).

Pods here hold 10,000 KV tokens; a request's footprint is its prompt plus
``expected_output_tokens`` (100 in these tests).
"""

from __future__ import annotations

from typing import Any

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    Queued,
    Refusal,
    RefusalReason,
    RequestId,
)

from .builders import admission, ask, granted, in_flight, pod

SIZE = 10_000


def kv_pod(n: int, *, usage: float, at: float, cap: int = 100, **fields: Any) -> Any:
    return pod(n, cap=cap, kv_usage=usage, kv_observed_at=at, kv_capacity_tokens=SIZE, **fields)


def budgeted(*pods: Any) -> Admission:
    return admission(*pods, kv_limit=0.9, expected_output_tokens=100, stale_after_s=10.0)


def test_admits_while_the_estimate_stays_under_the_limit() -> None:
    admitted = budgeted(kv_pod(0, usage=0.5, at=0.0))
    for id in "abc":  # 0.5 * 10,000 + 3 * 1,100 = 8,300
        granted(admitted.ask(ask=ask(id, tokens=1000), now=1.0))
    assert isinstance(admitted.ask(ask=ask("d", tokens=1000), now=1.0), Queued)  # 9,400 >= 9,000
    assert in_flight(admitted) == {"pod-0": 3}


def test_the_footprint_includes_the_expected_output() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0))
    granted(admitted.ask(ask=ask("a", tokens=1), now=1.0))
    assert isinstance(admitted.ask(ask=ask("b", tokens=8800), now=1.0), Queued)


def test_a_full_pod_sends_work_to_one_with_kv_room() -> None:
    admitted = budgeted(kv_pod(0, usage=0.89, at=0.0), kv_pod(1, usage=0.2, at=0.0))
    granted(admitted.ask(ask=ask("a", subset=frozenset({"10.0.0.0:8000"})), now=1.0))
    assert granted(admitted.ask(ask=ask("b", tokens=500), now=1.0)).pod == "pod-1"
    assert granted(admitted.ask(ask=ask("c", tokens=500), now=1.0)).pod == "pod-1"


def test_a_stale_snapshot_fails_open_to_the_count_cap() -> None:
    admitted = budgeted(kv_pod(0, usage=0.99, at=0.0, cap=2))
    granted(admitted.ask(ask=ask("a"), now=1.0))  # empty pod: always admitted
    assert isinstance(admitted.ask(ask=ask("b"), now=1.0), Queued)
    assert admitted.dispatch(now=10.0) == []  # exactly stale_after_s old: still fresh
    [grant] = admitted.dispatch(now=10.5)
    assert grant.id == "b"
    assert isinstance(admitted.ask(ask=ask("c"), now=10.5), Queued)  # now the count cap binds


def test_missing_kv_metrics_fail_open() -> None:
    admitted = budgeted(pod(0, cap=3, kv_usage=0.99), pod(1, cap=3, kv_capacity_tokens=SIZE))
    picks = [granted(admitted.ask(ask=ask(str(i), tokens=5000), now=1.0)).pod for i in range(6)]
    assert sorted(picks) == ["pod-0"] * 3 + ["pod-1"] * 3


def test_an_empty_pod_takes_a_request_larger_than_its_budget() -> None:
    admitted = budgeted(kv_pod(0, usage=0.95, at=0.0))
    granted(admitted.ask(ask=ask("huge", tokens=9500), now=1.0))
    assert isinstance(admitted.ask(ask=ask("small", tokens=1), now=1.0), Queued)


def test_a_prompt_larger_than_every_kv_cache_is_refused() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0), kv_pod(1, usage=0.0, at=0.0))
    refusal = admitted.ask(ask=ask("a", tokens=SIZE + 1), now=1.0)
    assert isinstance(refusal, Refusal)
    assert (refusal.reason, refusal.status, refusal.retry_after_s) == (
        RefusalReason.TOO_LARGE,
        429,
        None,
    )
    granted(admitted.ask(ask=ask("b", tokens=SIZE), now=1.0))


def test_a_pod_of_unknown_kv_size_takes_any_prompt() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0), pod(1))
    assert granted(admitted.ask(ask=ask("a", tokens=SIZE * 5), now=1.0)).pod == "pod-0"


def test_a_fresher_lower_snapshot_serves_the_queue() -> None:
    admitted = budgeted(kv_pod(0, usage=0.88, at=0.0))
    granted(admitted.ask(ask=ask("a"), now=1.0))
    assert isinstance(admitted.ask(ask=ask("b"), now=1.0), Queued)
    assert admitted.set_pods(pods=[kv_pod(0, usage=0.89, at=1.5)], now=2.0) == []
    [grant] = admitted.set_pods(pods=[kv_pod(0, usage=0.3, at=2.5)], now=3.0)
    assert grant.id == "b"


def test_a_release_returns_its_tokens_to_the_budget() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0))
    for id in "abcdefgh":
        granted(admitted.ask(ask=ask(id, tokens=1000), now=1.0))  # 8 * 1,100 = 8,800
    admitted.ask(ask=ask("i", tokens=1000), now=1.0)
    [grant] = admitted.release(id=RequestId("a"), now=2.0)
    assert grant.id == "i"


def test_a_newer_snapshot_counts_only_requests_granted_after_it() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0))
    granted(admitted.ask(ask=ask("a", tokens=4000), now=1.0))
    # The snapshot at 2.0 already holds "a" (4,100 tokens): 0.41 + 4,100 more would be
    # 8,200 < 9,000, so "b" fits; double counting "a" would make it 12,300.
    admitted.set_pods(pods=[kv_pod(0, usage=0.41, at=2.0)], now=2.5)
    granted(admitted.ask(ask=ask("b", tokens=4000), now=3.0))
    assert isinstance(admitted.ask(ask=ask("c", tokens=1000), now=3.0), Queued)


def test_a_release_the_snapshot_saw_subtracts_prompt_and_real_output() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0))
    granted(admitted.ask(ask=ask("a", tokens=1000), now=1.0))
    granted(admitted.ask(ask=ask("b", tokens=1000), now=1.0))
    admitted.set_pods(pods=[kv_pod(0, usage=0.85, at=2.0)], now=2.0)  # 8,500 tokens in use
    admitted.ask(ask=ask("big", tokens=2000), now=2.0)  # 8,500 + 2,100 >= 9,000
    assert admitted.release(id=RequestId("a"), now=3.0, output_tokens=0) == []  # -1,000
    [grant] = admitted.release(id=RequestId("b"), now=3.0, output_tokens=500)  # -1,500
    assert grant.id == "big"  # 6,000 + 2,100 < 9,000


def test_a_snapshot_taken_before_a_release_still_sees_that_release() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0))
    granted(admitted.ask(ask=ask("a", tokens=4000), now=1.0))
    granted(admitted.ask(ask=ask("b", tokens=3000), now=1.0))
    admitted.release(id=RequestId("a"), now=3.0)
    # Taken at 2.0, before "a" ended, it shows both requests (0.72); "a"'s 4,100 come off.
    admitted.set_pods(pods=[kv_pod(0, usage=0.72, at=2.0)], now=3.5)
    granted(admitted.ask(ask=ask("c", tokens=5000), now=3.5))  # 3,100 + 5,100 = 8,200


def test_an_older_snapshot_than_the_one_held_is_ignored() -> None:
    admitted = budgeted(kv_pod(0, usage=0.0, at=5.0))
    granted(admitted.ask(ask=ask("a"), now=5.5))
    admitted.set_pods(pods=[kv_pod(0, usage=0.95, at=4.0)], now=6.0)
    stats = admitted.stats().pods[0]
    assert stats.kv_observed_at == 5.0
    granted(admitted.ask(ask=ask("b"), now=6.0))


def test_stats_show_the_estimate() -> None:
    admitted = budgeted(kv_pod(0, usage=0.5, at=0.0))
    granted(admitted.ask(ask=ask("a", tokens=900), now=1.0))
    assert admitted.stats().pods[0].kv_estimate == 0.6


def test_a_looser_kv_limit_serves_the_queue() -> None:
    admitted = budgeted(kv_pod(0, usage=0.8, at=0.0))
    granted(admitted.ask(ask=ask("a", tokens=100), now=1.0))
    admitted.ask(ask=ask("b", tokens=1000), now=1.0)
    settings = AdmissionSettings(kv_limit=1.0, expected_output_tokens=100, stale_after_s=10.0)
    [grant] = admitted.configure(settings=settings, now=2.0)
    assert grant.id == "b"


def test_a_grant_older_than_the_snapshot_still_counts_until_it_ends() -> None:
    # A long prompt granted before the snapshot but not yet allocated by the engine (waiting
    # or prefilling) is missing from the snapshot; its footprint must still hold its room.
    admitted = budgeted(kv_pod(0, usage=0.0, at=0.0))
    granted(admitted.ask(ask=ask("long", tokens=6000), now=1.0))
    admitted.set_pods(pods=[kv_pod(0, usage=0.05, at=2.0)], now=2.0)
    assert isinstance(admitted.ask(ask=ask("next", tokens=6000), now=2.5), Queued)
    assert [g.id for g in admitted.release(id=RequestId("long"), now=3.0)] == ["next"]
