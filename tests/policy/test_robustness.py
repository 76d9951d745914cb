"""Whatever the inputs, a decision is well-formed.

Hypothesis feeds NaN, infinities, negatives, ``None`` and missing samples, duplicate names,
arbitrary previous decisions (even with weights outside the scale) and any ``elapsed_s``; every
decision must then hold finite int weights in the scale, caps >= 1 and a reason per pod.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.api.records import Decision, PodInput, PodState
from trimtab.policy import PolicySettings, compute_decision

from .builders import pod, pod_inputs, previous_decisions

POLICIES = st.sampled_from(
    [
        PolicySettings(),
        PolicySettings(adaptive_caps=True, max_in_flight_per_pod=3, min_in_flight_per_pod=1),
        PolicySettings(weight_scale=1, smoothing_s=0.0, stale_decay_s=0.0, slow_start_s=0.0),
        PolicySettings(
            queue_weight=100.0,
            kv_low_watermark=0.0,
            kv_high_watermark=0.01,
            min_weight_change=0.0,
        ),
    ]
)


def test_empty_pool_gives_empty_decision() -> None:
    assert compute_decision(pods=[], previous=None, settings=PolicySettings(), elapsed_s=2.0) == (
        Decision()
    )


@settings(max_examples=300, deadline=None)
@given(
    pods=st.lists(pod_inputs, max_size=10),
    previous=previous_decisions,
    policy=POLICIES,
    elapsed_s=st.floats(allow_nan=True, allow_infinity=True),
)
def test_any_input_gives_a_well_formed_decision(
    pods: list[PodInput],
    previous: Decision | None,
    policy: PolicySettings,
    elapsed_s: float,
) -> None:
    decision = compute_decision(pods=pods, previous=previous, settings=policy, elapsed_s=elapsed_s)
    names = list(dict.fromkeys(p.name for p in pods))
    assert [p.name for p in decision.pods] == names
    for decided in decision.pods:
        assert type(decided.weight) is int
        assert policy.min_weight <= decided.weight <= policy.weight_scale
        assert decided.weight >= 1
        assert type(decided.max_in_flight) is int
        assert 1 <= decided.max_in_flight <= policy.max_in_flight_per_pod
        assert isinstance(decided.state, PodState)
        assert decided.reason
        assert "nan" not in decided.reason and "inf" not in decided.reason


def test_first_of_duplicate_names_wins() -> None:
    decision = compute_decision(
        pods=[pod("a", kv=0.0), pod("a", kv=0.89), pod("b", kv=0.89)],
        previous=None,
        settings=PolicySettings(),
        elapsed_s=2.0,
    )
    assert [p.name for p in decision.pods] == ["a", "b"]
    assert decision.pods[0].weight > decision.pods[1].weight


def test_garbage_values_read_as_missing_not_as_load() -> None:
    decision = compute_decision(
        pods=[pod("a", kv=math.nan, waiting=-3.0, running=math.inf, preemptions=math.nan)],
        previous=None,
        settings=PolicySettings(),
        elapsed_s=2.0,
    )
    (only,) = decision.pods
    assert only.state is PodState.SERVING
    assert only.weight == PolicySettings().weight_scale
    assert only.reason == "q 0"


def test_huge_running_count_keeps_the_adaptive_cap_at_the_ceiling() -> None:
    adaptive = PolicySettings(adaptive_caps=True, max_in_flight_per_pod=3, min_in_flight_per_pod=1)
    decision = compute_decision(
        pods=[pod("a", running=8e307, kv=0.5)], previous=None, settings=adaptive, elapsed_s=0.0
    )
    assert decision.pods[0].max_in_flight == 3
