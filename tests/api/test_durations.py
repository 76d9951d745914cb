"""Kubernetes-style durations: parsing, formatting and their round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trimtab.api.durations import LONGEST, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("1m", 60.0), ("1m30s", 90.0), ("1h", 3600.0), ("1.5s", 1.5)],
)
def test_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "2", "s", "2 s", "-1s", "1d", "1m-30s", "2sec"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.integers(min_value=0, max_value=int(LONGEST * 1000)))
def test_format_round_trips_whole_milliseconds(millis: int) -> None:
    assert parse_duration(format_duration(millis / 1000)) == pytest.approx(millis / 1000)


@pytest.mark.parametrize("text", ["169h", "604800001ms", "99999999999999999999999h"])
def test_parse_refuses_more_than_a_week(text: str) -> None:
    with pytest.raises(ValueError, match="longer than a week"):
        parse_duration(text)
