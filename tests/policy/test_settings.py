"""PolicySettings: defaults are valid, and each bad value is rejected naming its field.

Covers out-of-range, NaN, wrong-type (including bool for numbers) and the cross-field check.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from trimtab.policy import PolicySettings

BAD_VALUES: dict[str, list[object]] = {
    "max_in_flight_per_pod": [0, -1, 1.5, True, "64"],
    "min_in_flight_per_pod": [0, 2.0],
    "slow_start_s": [-1.0, math.nan, 3601.0],
    "slow_start_min_fraction": [0.0, 1.5],
    "stale_after_s": [0.0, math.inf],
    "stale_decay_s": [-0.1],
    "kv_low_watermark": [-0.1, 1.0, 0.95],
    "kv_high_watermark": [0.0, 1.01, math.nan, 0.5],
    "queue_weight": [-1.0, 101.0],
    "smoothing_s": [-1.0, math.inf],
    "min_weight_change": [1.0, -0.1],
    "weight_scale": [0, 100_001, 10.0],
    "weight_floor": [0.0, 2.0],
    "adaptive_caps": [1, "yes", None],
    "cap_headroom": [-0.5],
    "speed_weight": [-0.1, 10.5, math.nan],
    "drain_preemption_rate": [0.0, -1.0, math.nan],
    "drain_cap_fraction": [0.0, 1.1],
    "active_request_bias": [-0.1, math.inf],
    "choice_count": [1, 0, 2.0],
    "max_pending_requests": [0, -5],
}


def test_defaults_are_valid() -> None:
    settings = PolicySettings()
    assert settings.max_in_flight_per_pod == 1024
    assert settings.slow_start_s == 60.0
    assert settings.stale_after_s == 15.0
    assert settings.choice_count == 2


def test_every_field_has_a_bad_value_case() -> None:
    assert set(BAD_VALUES) == {f.name for f in dataclasses.fields(PolicySettings)}


@pytest.mark.parametrize(
    ("name", "value"), [(name, value) for name, values in BAD_VALUES.items() for value in values]
)
def test_bad_value_names_the_field(name: str, value: object) -> None:
    with pytest.raises(ValueError, match=name):
        PolicySettings(**{name: value})  # type: ignore[arg-type]


def test_floor_cap_above_ceiling_is_rejected() -> None:
    with pytest.raises(ValueError, match="min_in_flight_per_pod"):
        PolicySettings(min_in_flight_per_pod=10, max_in_flight_per_pod=5)


def test_infinite_drain_rate_is_allowed_and_ints_pass_for_floats() -> None:
    settings = PolicySettings(drain_preemption_rate=math.inf, slow_start_s=0)
    assert settings.slow_start_s == 0


def test_settings_are_frozen() -> None:
    settings = PolicySettings()
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.weight_scale = 5  # type: ignore[misc]


def test_min_weight_is_at_least_one() -> None:
    assert PolicySettings(weight_scale=10, weight_floor=0.01).min_weight == 1
    assert PolicySettings().min_weight == 20
