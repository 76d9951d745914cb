"""Grouping pods into weight tiers: exact with few pods, similar weights together, stable."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.api.records import PodName
from trimtab.targets.gatewayapi.tiers import MAX_BACKEND_WEIGHT, Tier, group_pods


def pods(weights: list[int]) -> dict[PodName, int]:
    return {PodName(f"pod-{i:03d}"): w for i, w in enumerate(weights)}


def test_one_tier_per_pod_while_pods_fit() -> None:
    weights = pods([100, 900, 500])
    tiers = group_pods(weights, tiers=16)
    assert sorted(t.pods for t in tiers) == sorted((p,) for p in weights)
    assert {t.pods[0]: t.weight for t in tiers} == weights


def test_similar_weights_share_a_tier() -> None:
    weights = pods([100, 101, 99, 1000, 1001, 999, 500, 502])
    tiers = group_pods(weights, tiers=3)
    groups = sorted(sorted(weights[p] for p in t.pods) for t in tiers)
    assert groups == [[99, 100, 101], [500, 502], [999, 1000, 1001]]


def test_the_tier_weight_is_the_sum_of_its_pods() -> None:
    weights = pods([10, 20, 30, 40, 50])
    tiers = group_pods(weights, tiers=2)
    assert sum(t.weight for t in tiers) == 150
    for tier in tiers:
        assert tier.weight == sum(weights[p] for p in tier.pods)


def test_the_grouping_is_optimal_against_brute_force() -> None:
    rng = random.Random(7)
    for _ in range(30):
        weights = pods([rng.randint(1, 1000) for _ in range(8)])
        tiers = group_pods(weights, tiers=3)
        values = sorted(weights.values())

        def spread(groups: list[list[int]]) -> float:
            return sum(sum((v - sum(g) / len(g)) ** 2 for v in g) for g in groups)

        best = min(
            spread([values[:a], values[a:b], values[b:]])
            for a, b in itertools.combinations(range(1, 8), 2)
        )
        got = spread([[weights[p] for p in t.pods] for t in tiers])
        assert got == pytest.approx(best)


def test_weights_above_the_crd_limit_are_scaled_down() -> None:
    weights = pods([100_000] * 40)
    tiers = group_pods(weights, tiers=2)
    assert max(t.weight for t in tiers) <= MAX_BACKEND_WEIGHT
    per_pod = [t.weight / len(t.pods) for t in tiers]
    assert max(per_pod) == pytest.approx(min(per_pod), rel=1e-3)  # equal pods, equal shares


def test_a_small_weight_change_keeps_the_grouping() -> None:
    weights = pods([100 + i for i in range(20)] + [1000 + i for i in range(20)])
    first = group_pods(weights, tiers=4)
    nudged = {p: w + (3 if i % 2 else -3) for i, (p, w) in enumerate(weights.items())}
    second = group_pods(nudged, tiers=4, previous=first)
    assert [t.pods for t in second] == [t.pods for t in first]


def test_a_big_change_regroups_and_keeps_slots_by_overlap() -> None:
    weights = pods([100] * 10 + [1000] * 10)
    first = group_pods(weights, tiers=2)
    low = next(t for t in first if weights[t.pods[0]] == 100)
    moved = dict(weights)
    for pod in list(low.pods)[:5]:
        moved[pod] = 1000
    second = group_pods(moved, tiers=2, previous=first)
    high_now = next(t for t in second if moved[t.pods[0]] == 1000)
    high_before = next(t for t in first if weights[t.pods[0]] == 1000)
    assert len(high_now.pods) == 15
    assert high_now.slot == high_before.slot


def test_new_pods_join_the_nearest_tier_and_gone_pods_leave() -> None:
    weights = pods([100] * 10 + [1000] * 10)
    first = group_pods(weights, tiers=2)
    later = {p: w for p, w in weights.items() if p != "pod-000"}
    later[PodName("pod-new")] = 990
    second = group_pods(later, tiers=2, previous=first)
    everyone = [p for t in second for p in t.pods]
    assert "pod-000" not in everyone
    assert next(t for t in second if "pod-new" in t.pods).pods == tuple(
        sorted([*(f"pod-{i:03d}" for i in range(10, 20)), "pod-new"])
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=100_000), min_size=1, max_size=80),
    st.integers(min_value=1, max_value=16),
)
def test_every_pod_in_exactly_one_of_at_most_tiers(weights: list[int], count: int) -> None:
    named = pods(weights)
    tiers: tuple[Tier, ...] = group_pods(named, tiers=count)
    assert 1 <= len(tiers) <= count
    assert sorted(p for t in tiers for p in t.pods) == sorted(named)
    assert len({t.slot for t in tiers}) == len(tiers)
    assert all(0 <= t.slot < count and 1 <= t.weight <= MAX_BACKEND_WEIGHT for t in tiers)
