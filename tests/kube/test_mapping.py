"""``spec.policy`` ↔ PolicySettings: the API mirrors every policy knob, with the same defaults.

Aspects: a default spec maps to the policy's own defaults (no drift between the CRD and the
simulator-chosen values); every knob set in the spec reaches the policy (none is dropped).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trimtab.api.validation import parse_spec
from trimtab.balancing.mapping import settings_from_spec
from trimtab.policy import PolicySettings

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


def test_spec_policy_has_a_field_per_knob() -> None:
    # stale_after_s lives in spec.metrics; every other knob has a spec.policy twin.
    knobs = {f.name.removesuffix("_s") for f in dataclasses.fields(PolicySettings)}
    assert knobs - {"stale_after"} == set(type(parse_spec(BASE).policy).model_fields)
