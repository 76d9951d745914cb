"""``spec.policy`` ↔ PolicySettings: the API mirrors every policy knob, defaults and ranges.

Aspects: a default spec maps to the policy's own defaults (no drift between the CRD and the
simulator-chosen values); every knob set in the spec reaches the policy (none is dropped);
each numeric knob has the same bounds in the CRD as in the policy, and each duration knob is
accepted up to the policy's limit and refused (SpecInvalid naming the spec field) above it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import annotated_types
import pytest
from pydantic.alias_generators import to_camel

from trimtab.api.durations import format_duration
from trimtab.api.spec import PolicySpec
from trimtab.api.validation import parse_spec
from trimtab.balancing.mapping import settings_from_spec, spec_field
from trimtab.errors import SpecInvalid
from trimtab.policy import PolicySettings
from trimtab.policy.settings import _RANGES

BASE: dict[str, Any] = {
    "selector": {"matchLabels": {"app": "vllm"}},
    "targets": [{"envoy": {"cluster": "llama"}}],
}

EVERY_KNOB_CHANGED = {
    "maxInFlightPerPod": 200,
    "minInFlightPerPod": 8,
    "adaptiveCaps": True,
    "capHeadroom": 0.5,
    "slowStart": "2m",
    "slowStartMinFraction": 0.3,
    "staleDecay": "20s",
    "kvLowWatermark": 0.6,
    "kvHighWatermark": 0.95,
    "queueWeight": 1.0,
    "speedWeight": 3.0,
    "smoothing": "10s",
    "minWeightChange": 0.1,
    "weightScale": 500,
    "weightFloor": 0.05,
    "drainPreemptionRate": 2.0,
    "drainCapFraction": 0.25,
    "activeRequestBias": 1.0,
    "choiceCount": 3,
    "maxPendingRequests": 99,
}


def test_default_spec_gives_the_policy_defaults() -> None:
    assert settings_from_spec(parse_spec(BASE)) == PolicySettings()


def test_every_policy_knob_reaches_the_policy() -> None:
    spec = parse_spec(
        {**BASE, "policy": EVERY_KNOB_CHANGED, "metrics": {"interval": "1s", "staleAfter": "9s"}}
    )
    settings = settings_from_spec(spec)
    defaults = PolicySettings()
    unchanged = [
        f.name
        for f in dataclasses.fields(PolicySettings)
        if getattr(settings, f.name) == getattr(defaults, f.name)
    ]
    assert unchanged == []


# spec.policy fields that shape only what Envoy is told (the cluster's load balancer), never a
# decision: the policy has no twin for them.
ENVOY_ONLY = {"affinity"}


def test_spec_policy_has_a_field_per_knob() -> None:
    # stale_after_s lives in spec.metrics; every other knob has a spec.policy twin.
    knobs = {f.name.removesuffix("_s") for f in dataclasses.fields(PolicySettings)}
    fields = set(type(parse_spec(BASE).policy).model_fields)
    assert knobs - {"stale_after"} == fields - ENVOY_ONLY


def _crd_bounds(field: str) -> tuple[float, float, bool, bool]:
    low, high, low_inclusive, high_inclusive = -math.inf, math.inf, True, True
    for rule in PolicySpec.model_fields[field].metadata:
        if isinstance(rule, annotated_types.Ge):
            low, low_inclusive = float(rule.ge), True  # type: ignore[arg-type]
        elif isinstance(rule, annotated_types.Gt):
            low, low_inclusive = float(rule.gt), False  # type: ignore[arg-type]
        elif isinstance(rule, annotated_types.Le):
            high, high_inclusive = float(rule.le), True  # type: ignore[arg-type]
        elif isinstance(rule, annotated_types.Lt):
            high, high_inclusive = float(rule.lt), False  # type: ignore[arg-type]
    return low, high, low_inclusive, high_inclusive


@pytest.mark.parametrize(
    "knob",
    [
        f.name
        for f in dataclasses.fields(PolicySettings)
        if f.type in ("int", "float") and not f.name.endswith("_s")
    ],
)
def test_numeric_knobs_have_the_policy_range_in_the_crd(knob: str) -> None:
    _, field = spec_field(knob)
    low, high, low_inclusive, high_inclusive = _RANGES[knob]
    assert _crd_bounds(field) == (float(low), float(high), low_inclusive, high_inclusive)


@pytest.mark.parametrize(
    "knob", [f.name for f in dataclasses.fields(PolicySettings) if f.name.endswith("_s")]
)
def test_duration_knobs_end_where_the_policy_range_ends(knob: str) -> None:
    section, field = spec_field(knob)
    wire = f"spec.{section}.{to_camel(field)}"
    high = _RANGES[knob][1]

    def settings(seconds: float) -> PolicySettings:
        return settings_from_spec(
            parse_spec({**BASE, section: {to_camel(field): format_duration(seconds)}})
        )

    assert getattr(settings(high), knob) == high
    with pytest.raises(SpecInvalid, match=wire.replace(".", r"\.")):
        settings(high + 1)
