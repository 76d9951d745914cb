"""``spec.policy`` and ``spec.metrics`` → :class:`~trimtab.policy.PolicySettings`, derived.

The knobs are declared by :class:`~trimtab.policy.PolicySettings`; ``spec.policy`` has a
camelCase twin of each with the same default and range (a test keeps them equal). So this
mapping names no knob: each settings field is read from the spec field of the same name
without its ``_s`` unit suffix (a duration there, seconds here), except ``staleAfter``, which
is a property of the metrics. Should the policy still refuse a value the CRD let through, the
error becomes :class:`~trimtab.errors.SpecInvalid` naming the spec field, not a crash.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from trimtab.api.durations import DurationValue
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import SpecInvalid
from trimtab.policy import PolicySettings

__all__ = ["settings_from_spec", "spec_field"]

_IN_METRICS = frozenset({"stale_after_s"})
"""Knobs that are properties of the metrics, not of the policy."""


def spec_field(knob: str) -> tuple[str, str]:
    """``(section, field)`` of the spec that sets the settings field ``knob``."""
    return ("metrics" if knob in _IN_METRICS else "policy", knob.removesuffix("_s"))


def settings_from_spec(spec: InferencePoolSpec) -> PolicySettings:
    """The policy settings of a pool; raise :class:`SpecInvalid` if the policy refuses them."""
    values: dict[str, Any] = {}
    for knob in dataclasses.fields(PolicySettings):
        section, name = spec_field(knob.name)
        model: BaseModel = getattr(spec, section)
        value = getattr(model, name)
        values[knob.name] = float(value) if isinstance(value, DurationValue) else value
    try:
        return PolicySettings(**values)
    except ValueError as exc:
        section, name = spec_field(str(exc).split(" ", 1)[0])
        raise SpecInvalid([f"spec.{section}.{to_camel(name)}: {exc}"]) from exc
