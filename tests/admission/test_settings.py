"""Validation: every bad setting, pod capacity, ask or clock value raises SpecInvalid naming it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from trimtab.admission import Admission, AdmissionSettings, Ask, PodCapacity, RequestId
from trimtab.api.records import PodName
from trimtab.errors import SpecInvalid

from .builders import admission, ask, pod

BAD_SETTINGS: dict[str, list[object]] = {
    "queue_length": [-1, 1.5, True, 10_000_001],
    "queue_ttl_s": [0.0, -1.0, math.nan, math.inf],
    "kv_limit": [0.0, 1.01, math.nan, "0.9"],
    "expected_output_tokens": [-1, 2.5],
    "bytes_per_token": [0.0, -4.0],
    "stale_after_s": [0.0, 3601.0],
    "priority_classes": [0, 65, 1.0],
    "retry_after_s": [-0.1, math.inf],
    "max_fallbacks": [-1, 17],
    "affinity": ["prefix", True],
    "affinity_block_tokens": [0, 1.5],
    "affinity_max_prefix_bytes": [-1, 16 * 1024 * 1024 + 1],
    "affinity_load_factor": [0.99, math.nan, 101.0],
}


def test_defaults_are_valid() -> None:
    settings = AdmissionSettings()
    assert settings.queue_length == 1024
    assert settings.kv_limit == 0.9
    assert settings.max_fallbacks == 3


def test_every_setting_has_a_bad_value_case() -> None:
    assert set(BAD_SETTINGS) == {f.name for f in dataclasses.fields(AdmissionSettings)}


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in BAD_SETTINGS.items() for value in values]
)
def test_bad_setting_names_the_field(name: str, value: object) -> None:
    with pytest.raises(SpecInvalid, match=name):
        AdmissionSettings(**{name: value})  # type: ignore[arg-type]


def test_every_problem_is_listed() -> None:
    with pytest.raises(SpecInvalid) as caught:
        AdmissionSettings(queue_length=-1, kv_limit=2.0)
    assert len(caught.value.problems) == 2


def test_prompt_tokens_from_content_length() -> None:
    settings = AdmissionSettings(bytes_per_token=4.0)
    assert settings.estimate_prompt_tokens(content_length=4001) == 1001
    assert settings.estimate_prompt_tokens(content_length=-5) == 0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", ""),
        ("address", ""),
        ("cap", -1),
        ("cap", 2.0),
        ("accepting", 1),
        ("speed", 0.0),
        ("speed", math.inf),
        ("kv_usage", math.nan),
        ("kv_usage", -0.1),
        ("kv_observed_at", math.inf),
        ("kv_capacity_tokens", 0),
        ("kv_capacity_tokens", True),
    ],
)
def test_bad_pod_capacity_names_the_field(field: str, value: object) -> None:
    fields: dict[str, Any] = {"name": PodName("pod-0"), "address": "10.0.0.0:8000", "cap": 4}
    fields[field] = value
    with pytest.raises(SpecInvalid, match=field):
        PodCapacity(**fields)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("prompt_tokens", -1),
        ("prompt_tokens", 1.5),
        ("priority", -1),
        ("subset", {"10.0.0.0:8000"}),
        ("subset", frozenset({1})),
        ("id", 7),
    ],
)
def test_bad_ask_names_the_field(field: str, value: object) -> None:
    fields: dict[str, Any] = {"id": RequestId("r"), "prompt_tokens": 10}
    fields[field] = value
    with pytest.raises(SpecInvalid, match=field):
        Ask(**fields)


def test_wrong_settings_type_is_refused() -> None:
    with pytest.raises(SpecInvalid, match="settings"):
        Admission(settings=object())  # type: ignore[arg-type]


@pytest.mark.parametrize("now", [math.nan, math.inf, True, "1"])
def test_bad_clock_is_refused(now: object) -> None:
    admitted = admission(pod(0))
    with pytest.raises(SpecInvalid, match="now"):
        admitted.ask(ask=ask("r"), now=now)  # type: ignore[arg-type]
    assert admitted.stats().asked == 0
