"""Prefix affinity under the load guard: cached pods win while within the bound, and only then."""

from __future__ import annotations

import math
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    AffinityMode,
    Ask,
    Grant,
    PickReason,
    PodCapacity,
    RequestId,
)
from trimtab.admission.prefix import prompt_block_hashes
from trimtab.api.records import PodName

from .builders import address, admission, ask, granted, in_flight, pod

PREFIX = (11, 12, 13, 14)
OTHER = (21, 22)


def affine(*pods: PodCapacity, **settings: object) -> Admission:
    return admission(
        *pods,
        affinity=AffinityMode.PREFIX,
        affinity_block_tokens=512,
        **settings,  # type: ignore[arg-type]
    )


def test_same_prefix_goes_to_the_pod_that_was_sent_it() -> None:
    admitted = affine(pod(1, cap=8), pod(2, cap=8), pod(3, cap=8))
    first = granted(admitted.ask(ask=ask("a", tokens=2100, prefix=PREFIX), now=0.0))
    assert first.reason is PickReason.MISS
    second = granted(admitted.ask(ask=ask("b", tokens=2100, prefix=PREFIX), now=0.0))
    # pod-1 has one in flight, the others none: 2 <= ceil(1.25 * 1) = 2, within the bound.
    assert second.pod == first.pod
    assert second.reason is PickReason.HIT
    assert second.hit_tokens == 4 * 512
    stats = admitted.stats()
    assert stats.picks[PickReason.HIT] == 1
    assert stats.picks[PickReason.MISS] == 1
    assert stats.hit_tokens == 2048


def test_a_longer_match_beats_a_shorter_one() -> None:
    admitted = affine(pod(1, cap=8), pod(2, cap=8), pod(3, cap=8))
    short = granted(admitted.ask(ask=ask("a", prefix=PREFIX[:1]), now=0.0))
    admitted.release(id=RequestId("a"), now=0.0)
    admitted.ask(ask=ask("x"), now=0.0)  # somewhere else, so the pods differ in load
    long = granted(admitted.ask(ask=ask("b", prefix=PREFIX), now=0.0))
    admitted.release(id=RequestId("b"), now=0.0)
    if long.pod == short.pod:
        return
    again = granted(admitted.ask(ask=ask("c", tokens=3000, prefix=PREFIX), now=0.0))
    assert again.pod == long.pod
    assert again.hit_tokens == 4 * 512


def test_spills_when_the_cached_pod_is_beyond_the_bound() -> None:
    admitted = affine(pod(1, cap=100), pod(2, cap=100), affinity_load_factor=1.5)
    pods = []
    for n in range(6):
        pods.append(granted(admitted.ask(ask=ask(f"r{n}", prefix=PREFIX), now=0.0)))
    reasons = [grant.reason for grant in pods]
    assert PickReason.LOAD_GUARD in reasons
    counts = in_flight(admitted)
    # The bound: with the request, at most ceil(1.5 * (least + 1)).
    assert max(counts.values()) <= math.ceil(1.5 * (min(counts.values()) + 1))
    assert admitted.stats().picks[PickReason.LOAD_GUARD] >= 1


def test_a_cached_pod_at_its_cap_is_passed_over() -> None:
    admitted = affine(pod(1, cap=1), pod(2, cap=4), affinity_load_factor=100.0)
    first = granted(admitted.ask(ask=ask("a", prefix=PREFIX), now=0.0))
    second = granted(admitted.ask(ask=ask("b", prefix=PREFIX), now=0.0))
    if first.pod == PodName("pod-1"):
        assert second.pod == PodName("pod-2")
        assert second.reason is PickReason.NO_ROOM
    assert all(
        count <= cap for count, cap in zip(in_flight(admitted).values(), (1, 4), strict=True)
    )


def test_session_follows_its_pod() -> None:
    admitted = affine(pod(1, cap=8), pod(2, cap=8), pod(3, cap=8))
    first = granted(admitted.ask(ask=ask("a", tokens=900, session="s-1"), now=0.0))
    admitted.release(id=RequestId("a"), now=1.0)
    admitted.ask(ask=ask("x"), now=1.0)
    admitted.ask(ask=ask("y"), now=1.0)
    second = granted(admitted.ask(ask=ask("b", tokens=1500, session="s-1"), now=2.0))
    assert second.pod == first.pod
    assert second.reason is PickReason.HIT
    assert second.hit_tokens == 900


def test_affinity_off_and_requests_without_prefix_are_normal() -> None:
    plain = admission(pod(1), pod(2))
    assert granted(plain.ask(ask=ask("a", prefix=PREFIX), now=0.0)).reason is PickReason.NORMAL
    on = affine(pod(1), pod(2))
    assert granted(on.ask(ask=ask("a"), now=0.0)).reason is PickReason.NORMAL


def test_the_subset_hint_still_rules() -> None:
    admitted = affine(pod(1, cap=8), pod(2, cap=8))
    first = granted(admitted.ask(ask=ask("a", prefix=PREFIX), now=0.0))
    other = address(2) if first.pod == PodName("pod-1") else address(1)
    hinted = granted(admitted.ask(ask=ask("b", prefix=PREFIX, subset=frozenset({other})), now=0.0))
    assert hinted.address == other


def test_a_pod_forgets_the_oldest_prefixes_beyond_its_kv() -> None:
    # 2 blocks of 512 tokens: the second prompt pushes the first one out.
    admitted = affine(pod(1, cap=8, kv_capacity_tokens=1024))
    admitted.ask(ask=ask("a", prefix=PREFIX[:2]), now=0.0)
    admitted.ask(ask=ask("b", prefix=OTHER), now=0.0)
    again = granted(admitted.ask(ask=ask("c", prefix=PREFIX[:2]), now=0.0))
    assert again.reason is PickReason.MISS


def test_queued_requests_get_affinity_too() -> None:
    admitted = affine(pod(1, cap=1), pod(2, cap=1))
    first = granted(admitted.ask(ask=ask("a", prefix=PREFIX), now=0.0))
    admitted.ask(ask=ask("b", prefix=OTHER), now=0.0)
    admitted.ask(ask=ask("c", prefix=PREFIX), now=0.0)
    # Both pods gain a slot at once: the queue head goes where its prefix is.
    dispatched = admitted.set_pods(pods=[pod(1, cap=2), pod(2, cap=2)], now=1.0)
    assert len(dispatched) == 1
    assert isinstance(dispatched[0], Grant)
    assert dispatched[0].pod == first.pod
    assert dispatched[0].reason is PickReason.HIT


def test_block_hashes_of_one_prompt_match_across_requests() -> None:
    system = "You are a helpful assistant. " * 400
    one = prompt_block_hashes(text=system + "first?", block_tokens=512, chars_per_token=4)
    two = prompt_block_hashes(text=system + "second?", block_tokens=512, chars_per_token=4)
    admitted = affine(pod(1, cap=8), pod(2, cap=8))
    first = granted(admitted.ask(ask=ask("a", prefix=one), now=0.0))
    second = granted(admitted.ask(ask=ask("b", prefix=two), now=0.0))
    assert second.pod == first.pod
    assert second.hit_tokens == len(one) * 512 == len(two) * 512


# --- property: the guard never sends a pod above its cap or beyond the bounded factor --------

_PODS = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=6),  # cap
        st.sampled_from([0.5, 1.0, 1.0, 2.0, 3.0]),  # speed
        st.booleans() | st.just(True),  # accepting
    ),
    min_size=1,
    max_size=6,
)
_STEPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("ask"),
            st.integers(min_value=0, max_value=3),  # which prefix
            st.integers(min_value=1, max_value=4),  # how many of its blocks
            st.none() | st.sampled_from(["s1", "s2"]),
            st.none() | st.frozensets(st.integers(min_value=1, max_value=6), max_size=3),
        ),
        st.tuples(st.just("release"), st.integers(min_value=0, max_value=200)),
    ),
    max_size=60,
)


def _bound(*, target: PodCapacity, least: PodCapacity, least_in_flight: int, factor: float) -> int:
    exact = (
        Fraction(factor) * (least_in_flight + 1) * Fraction(target.speed) / Fraction(least.speed)
    )
    return math.ceil(exact)


@settings(max_examples=300, deadline=None)
@given(
    pods=_PODS,
    steps=_STEPS,
    factor=st.sampled_from([1.0, 1.1, 1.25, 1.5, 2.0, 3.0]),
)
def test_guard_never_exceeds_cap_or_factor(
    pods: list[tuple[int, float, bool]],
    steps: list[tuple[object, ...]],
    factor: float,
) -> None:
    capacities = [
        PodCapacity(
            name=PodName(f"pod-{n}"),
            address=address(n),
            cap=cap,
            speed=speed,
            accepting=accepting,
        )
        for n, (cap, speed, accepting) in enumerate(pods, start=1)
    ]
    by_name = {capacity.name: capacity for capacity in capacities}
    admitted = Admission(
        settings=AdmissionSettings(
            affinity=AffinityMode.PREFIX,
            affinity_load_factor=factor,
            queue_length=0,
        )
    )
    admitted.set_pods(pods=capacities, now=0.0)
    live: list[RequestId] = []
    prefixes = [tuple(range(base * 100, base * 100 + 4)) for base in range(4)]
    for number, step in enumerate(steps):
        if step[0] == "release":
            if live:
                index = int(step[1]) % len(live)  # type: ignore[call-overload]
                admitted.release(id=live.pop(index), now=float(number))
            continue
        _, which, blocks, session, subset_ns = step
        subset = (
            None if subset_ns is None else frozenset(address(int(n)) for n in subset_ns)  # type: ignore[attr-defined]
        )
        before = in_flight(admitted)
        eligible = [
            capacity
            for capacity in capacities
            if capacity.accepting
            and before[capacity.name] < capacity.cap
            and (subset is None or capacity.address in subset)
        ]
        answer = admitted.ask(
            ask=Ask(
                id=RequestId(f"r{number}"),
                prompt_tokens=600,
                prefix=prefixes[int(which)][: int(blocks)],  # type: ignore[call-overload]
                session=session,  # type: ignore[arg-type]
                subset=subset,
            ),
            now=float(number),
        )
        if not isinstance(answer, Grant):
            assert not eligible
            continue
        live.append(answer.id)
        target = by_name[answer.pod]
        assert target in eligible
        after = in_flight(admitted)
        assert after[answer.pod] <= target.cap
        lowest = min(Fraction(before[c.name]) / Fraction(c.speed) for c in eligible)
        tied = [c for c in eligible if Fraction(before[c.name]) / Fraction(c.speed) == lowest]
        assert any(
            after[answer.pod]
            <= _bound(target=target, least=least, least_in_flight=before[least.name], factor=factor)
            for least in tied
        ), (answer, before, after)
        if answer.reason in (PickReason.NORMAL, PickReason.MISS):
            assert target in tied, "no affinity pick, so the normal choice: least loaded"
    stats = admitted.stats()
    assert sum(stats.picks.values()) == stats.granted
