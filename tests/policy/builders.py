"""Builders and hypothesis strategies shared by the policy tests."""

from __future__ import annotations

import math

from hypothesis import strategies as st

from trimtab.api.records import Decision, PodDecision, PodInput, PodName, PodSample, PodState

# Anything a broken exporter, a counter reset or a clock skew could hand us.
nasty_floats = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, math.nan, math.inf, -math.inf, 1e308, 0.5]),
)

samples = st.one_of(
    st.none(),
    st.builds(
        PodSample,
        running=nasty_floats,
        waiting=nasty_floats,
        kv_usage=nasty_floats,
        preemption_rate=nasty_floats,
        age_s=nasty_floats,
    ),
)

pod_names = st.sampled_from([PodName(f"pod-{i}") for i in range(8)])

pod_inputs = st.builds(
    PodInput,
    name=pod_names,
    ready_for_s=st.floats(allow_nan=True, allow_infinity=True),
    sample=samples,
)

pod_decisions = st.builds(
    PodDecision,
    name=pod_names,
    weight=st.integers(min_value=-10, max_value=10**7),
    max_in_flight=st.integers(min_value=-10, max_value=10**6),
    state=st.sampled_from(list(PodState)),
    reason=st.text(max_size=5),
)

previous_decisions = st.one_of(
    st.none(), st.builds(Decision, pods=st.lists(pod_decisions, max_size=8).map(tuple))
)


def pod(
    name: str,
    *,
    running: float | None = 8.0,
    waiting: float | None = 0.0,
    kv: float | None = 0.5,
    preemptions: float | None = 0.0,
    age: float | None = 1.0,
    ready_for: float = math.inf,
) -> PodInput:
    """A warmed-up pod with fresh, ordinary metrics unless told otherwise."""
    sample = PodSample(
        running=running, waiting=waiting, kv_usage=kv, preemption_rate=preemptions, age_s=age
    )
    return PodInput(name=PodName(name), ready_for_s=ready_for, sample=sample)


def weights(decision: Decision) -> dict[str, int]:
    return {p.name: p.weight for p in decision.pods}
