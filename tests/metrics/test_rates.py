"""Counter rates kept between direct scrapes: first scrape, steady rise, reset, gaps, pruning."""

from __future__ import annotations

import pytest

from trimtab.api.records import PodName
from trimtab.metrics.rates import CounterRates

A, B = PodName("a"), PodName("b")


def test_first_reading_has_no_rate() -> None:
    assert CounterRates().update(pod=A, total=10.0, at=100.0) is None


def test_rate_is_increase_per_second() -> None:
    rates = CounterRates()
    rates.update(pod=A, total=10.0, at=100.0)
    assert rates.update(pod=A, total=16.0, at=102.0) == pytest.approx(3.0)


def test_counter_reset_counts_from_zero() -> None:
    rates = CounterRates()
    rates.update(pod=A, total=50.0, at=100.0)
    assert rates.update(pod=A, total=4.0, at=102.0) == pytest.approx(2.0)


def test_gap_restarts_the_chain() -> None:
    rates = CounterRates()
    rates.update(pod=A, total=1.0, at=100.0)
    assert rates.update(pod=A, total=None, at=101.0) is None
    assert rates.update(pod=A, total=9.0, at=102.0) is None


def test_pods_that_left_are_forgotten() -> None:
    rates = CounterRates()
    rates.update(pod=A, total=1.0, at=100.0)
    rates.update(pod=B, total=1.0, at=100.0)
    rates.retain(pods=[B])
    assert rates.update(pod=A, total=2.0, at=101.0) is None
    assert rates.update(pod=B, total=2.0, at=101.0) == pytest.approx(1.0)
