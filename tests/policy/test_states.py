"""Pod states: stale metrics decay to equal weights, slow start ramps, preemption drains.

Also checks the caps that go with each state (static, adaptive, reduced while draining).
"""

from __future__ import annotations

import math

from trimtab.api.records import PodInput, PodName, PodSample, PodState
from trimtab.policy import PolicySettings, compute_decision

from .builders import pod, weights

DEFAULTS = PolicySettings()


def test_stale_metrics_decay_to_equal_weights() -> None:
    loaded = [pod("a", kv=0.1), pod("b", kv=0.8, waiting=4.0), pod("c", kv=0.95)]
    decision = compute_decision(pods=loaded, previous=None, settings=DEFAULTS, elapsed_s=0.0)
    assert len(set(weights(decision).values())) == 3
    stale = [pod(p.name, kv=0.5, age=DEFAULTS.stale_after_s + 5.0) for p in loaded]
    first = compute_decision(pods=stale, previous=decision, settings=DEFAULTS, elapsed_s=2.0)
    assert all(p.state is PodState.STALE for p in first.pods)
    assert first.pods[1].reason == "metrics stale 20s"
    # Decaying, not snapping: the loaded pod moved up but is not yet equal.
    assert weights(decision)["b"] < weights(first)["b"] < DEFAULTS.weight_scale
    for _ in range(40):
        decision = compute_decision(pods=stale, previous=decision, settings=DEFAULTS, elapsed_s=2)
    assert set(weights(decision).values()) == {DEFAULTS.weight_scale}
    assert {p.max_in_flight for p in decision.pods} == {DEFAULTS.max_in_flight_per_pod}


def test_missing_metrics_are_stale_with_neutral_weight() -> None:
    pods = [
        PodInput(name=PodName("none"), ready_for_s=math.inf, sample=None),
        PodInput(name=PodName("empty"), ready_for_s=math.inf, sample=PodSample(age_s=1.0)),
        pod("busy", kv=0.85, waiting=3.0),
    ]
    decision = compute_decision(pods=pods, previous=None, settings=DEFAULTS, elapsed_s=2.0)
    by_name = decision.by_name()
    assert by_name[PodName("none")].state is PodState.STALE
    assert by_name[PodName("none")].reason == "no metrics"
    assert by_name[PodName("empty")].state is PodState.STALE
    assert by_name[PodName("none")].weight == DEFAULTS.weight_scale
    assert by_name[PodName("busy")].state is PodState.SERVING


def test_slow_start_ramps_weight_up() -> None:
    seen = []
    for ready_for in (0.0, 6.0, 15.0, 30.0, 45.0, 59.0, 60.0, 600.0):
        decision = compute_decision(
            pods=[pod("new", ready_for=ready_for), pod("old")],
            previous=None,
            settings=DEFAULTS,
            elapsed_s=2.0,
        )
        new = decision.pods[0]
        seen.append(new.weight)
        assert (new.state is PodState.WARMING) == (ready_for < DEFAULTS.slow_start_s)
    assert seen == sorted(seen)
    assert seen[0] == round(DEFAULTS.weight_scale * DEFAULTS.slow_start_min_fraction)
    assert seen[3] == DEFAULTS.weight_scale // 2
    assert seen[-1] == DEFAULTS.weight_scale


def test_warming_reason_counts_seconds() -> None:
    decision = compute_decision(
        pods=[pod("new", ready_for=12.4)], previous=None, settings=DEFAULTS, elapsed_s=2.0
    )
    assert decision.pods[0].reason == "warming 12/60s"


def test_preempting_pod_drains_to_the_floor_with_a_reduced_cap() -> None:
    pods = [pod("a"), pod("sick", preemptions=3.0)]
    decision = compute_decision(pods=pods, previous=None, settings=DEFAULTS, elapsed_s=2.0)
    sick = decision.pods[1]
    assert sick.state is PodState.DRAINING
    assert sick.weight == DEFAULTS.min_weight >= 1
    assert sick.max_in_flight == DEFAULTS.max_in_flight_per_pod // 2
    assert sick.reason == "preempting 3.0/s"
    assert decision.pods[0].weight == DEFAULTS.weight_scale


def test_draining_pod_recovers_only_well_below_the_threshold() -> None:
    threshold = DEFAULTS.drain_preemption_rate
    draining = compute_decision(
        pods=[pod("a", preemptions=threshold)], previous=None, settings=DEFAULTS, elapsed_s=2
    )
    hovering = compute_decision(
        pods=[pod("a", preemptions=threshold * 0.8)],
        previous=draining,
        settings=DEFAULTS,
        elapsed_s=2.0,
    )
    assert hovering.pods[0].state is PodState.DRAINING
    recovered = compute_decision(
        pods=[pod("a", preemptions=threshold * 0.1)],
        previous=hovering,
        settings=DEFAULTS,
        elapsed_s=2.0,
    )
    assert recovered.pods[0].state is PodState.SERVING
    assert recovered.pods[0].max_in_flight == DEFAULTS.max_in_flight_per_pod


def test_a_single_capped_pod_still_drains_to_one() -> None:
    tiny = PolicySettings(max_in_flight_per_pod=1, min_in_flight_per_pod=1)
    decision = compute_decision(
        pods=[pod("a", preemptions=9.0)], previous=None, settings=tiny, elapsed_s=2.0
    )
    assert decision.pods[0].max_in_flight == 1
    assert decision.pods[0].weight >= 1


def test_adaptive_cap_follows_the_batch_the_kv_cache_sustains() -> None:
    adaptive = PolicySettings(adaptive_caps=True, max_in_flight_per_pod=256, cap_headroom=0.0)
    decision = compute_decision(
        pods=[pod("long", running=10.0, kv=0.9), pod("short", running=10.0, kv=0.1)],
        previous=None,
        settings=adaptive,
        elapsed_s=2.0,
    )
    long, short = decision.pods
    assert long.max_in_flight == 10
    assert short.max_in_flight == 90


def test_adaptive_cap_holds_under_small_changes() -> None:
    adaptive = PolicySettings(adaptive_caps=True, max_in_flight_per_pod=256, cap_headroom=0.0)
    first = compute_decision(
        pods=[pod("a", running=40.0, kv=0.5)], previous=None, settings=adaptive, elapsed_s=2.0
    )
    second = compute_decision(
        pods=[pod("a", running=41.0, kv=0.5)], previous=first, settings=adaptive, elapsed_s=2.0
    )
    assert second.pods[0].max_in_flight == first.pods[0].max_in_flight == 72


def test_an_unreachable_pod_drops_to_the_floor_at_once_and_climbs_back_smoothly() -> None:
    settings = PolicySettings(slow_start_s=0.0)
    healthy = [pod("a", kv=0.3), pod("b", kv=0.3)]
    first = compute_decision(pods=healthy, previous=None, settings=settings, elapsed_s=2.0)
    dead = [
        pod("a", kv=0.3),
        PodInput(name=PodName("b"), ready_for_s=1e9, sample=PodSample(unreachable=True)),
    ]
    down = compute_decision(pods=dead, previous=first, settings=settings, elapsed_s=2.0)
    by_name = {p.name: p for p in down.pods}
    assert by_name[PodName("b")].state is PodState.UNREACHABLE
    assert by_name[PodName("b")].weight == settings.min_weight
    assert by_name[PodName("a")].weight > settings.min_weight
    back = compute_decision(pods=healthy, previous=down, settings=settings, elapsed_s=2.0)
    weight_b = {p.name: p.weight for p in back.pods}[PodName("b")]
    assert settings.min_weight < weight_b < settings.weight_scale


def test_kv_usage_above_one_is_refused_not_clamped() -> None:
    settings = PolicySettings(slow_start_s=0.0)
    pods = [pod("a", kv=0.3), pod("b", kv=85.0)]
    decision = compute_decision(pods=pods, previous=None, settings=settings, elapsed_s=2.0)
    b = {p.name: p for p in decision.pods}[PodName("b")]
    assert b.state is PodState.STALE
    assert "outside 0..1" in b.reason
    assert b.weight == settings.weight_scale
