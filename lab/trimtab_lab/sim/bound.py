"""The bound of a report: per metric, the best that ``ideal`` or ``oracle`` reached.

Neither reference bounds every regime alone: ``ideal`` (fresh state, no clairvoyance) piles
long prompts into engines that then preempt where KV binds, and ``oracle`` (known output
lengths, whole footprints reserved) holds everyone behind a long agent's footprint where it
does not. So the bound takes, scenario by scenario and metric by metric, the better of the two.
A realizable balancer that beats it by more than :data:`NOISE` shows that the bound is not
one: the report flags that as a bug in the bound, never as a win.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "BOUND_METRICS",
    "NOISE",
    "REFERENCES",
    "Better",
    "Bound",
    "BoundBreach",
    "compute_bound",
    "find_breaches",
]

NOISE = 0.05
"""A realizable balancer beating the bound by more than this fraction is a bug in the bound."""

REFERENCES = ("ideal", "oracle")
"""The balancers whose best makes the bound; every other balancer is realizable."""


class Better(enum.Enum):
    """Which way a metric improves."""

    LOWER = enum.auto()
    HIGHER = enum.auto()


BOUND_METRICS: Mapping[str, Better] = {
    "ttft_p99": Better.LOWER,
    "tpot_p99": Better.LOWER,
    "throughput_tokens_per_s": Better.HIGHER,
    "rejected": Better.LOWER,
    "preemptions": Better.LOWER,
    "goodput_multiplier": Better.HIGHER,
}
"""The headline metrics of a result's JSON, which the bound covers, and which way each
improves. Medians and p99 end-to-end latency are left out: neither reference aims at them (the
e2e tail is the decode time of the longest requests, which every balancer pays)."""

Flat = Mapping[str, float | int | str | None]


@dataclass(frozen=True, kw_only=True)
class Bound:
    """Per metric, the best reference value and which reference reached it."""

    values: Mapping[str, float | int]
    sources: Mapping[str, str]

    def to_json(self) -> dict[str, float | int | str]:
        """``{metric: value, ..., metric_from: reference, ...}``."""
        flat: dict[str, float | int | str] = dict(self.values)
        flat.update({f"{metric}_from": source for metric, source in self.sources.items()})
        return flat


@dataclass(frozen=True, kw_only=True)
class BoundBreach:
    """A realizable balancer better than the bound by more than :data:`NOISE`."""

    policy: str
    metric: str
    value: float | int
    bound: float | int

    def describe(self) -> str:
        return (
            f"{self.policy} {self.metric} {self.value:.4g} beats the bound {self.bound:.4g} "
            f"by more than {NOISE:.0%}: a bug in the bound"
        )


def compute_bound(results: Mapping[str, Flat]) -> Bound | None:
    """The bound over whichever references ran; ``None`` when neither did."""
    present = [name for name in REFERENCES if name in results]
    if not present:
        return None
    values: dict[str, float | int] = {}
    sources: dict[str, str] = {}
    for metric, better in BOUND_METRICS.items():
        candidates = [
            (value, name)
            for name in present
            if isinstance(value := results[name].get(metric), int | float)
        ]
        if not candidates:
            continue
        # Ties go to the first reference in REFERENCES order.
        pick = min if better is Better.LOWER else max
        value, source = pick(candidates, key=lambda candidate: candidate[0])
        values[metric], sources[metric] = value, source
    return Bound(values=values, sources=sources)


def find_breaches(*, results: Mapping[str, Flat], bound: Bound) -> list[BoundBreach]:
    """Every (realizable balancer, metric) that beats the bound by more than :data:`NOISE`."""
    breaches = []
    for policy, flat in results.items():
        if policy in REFERENCES:
            continue
        for metric, limit in bound.values.items():
            value = flat.get(metric)
            if not isinstance(value, int | float):
                continue
            if BOUND_METRICS[metric] is Better.LOWER:
                beaten = value < limit * (1 - NOISE)
            else:
                beaten = value > limit * (1 + NOISE)
            if beaten:
                breaches.append(BoundBreach(policy=policy, metric=metric, value=value, bound=limit))
    return breaches
