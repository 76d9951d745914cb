"""The last sample of every member, aged on each tick it is reused; "no series" detection.

A Ready member is never dropped for missing or stale metrics: :class:`SampleKeeper` passes its
last sample on with an age that grows with every tick, so the policy's ``staleAfter`` sees the
truth and decays the pod to equal weight. A member that leaves takes its sample with it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace

from trimtab.api.reasons import MetricsReason
from trimtab.api.records import PodName, PodSample
from trimtab.balancing.observations import MetricsProblem

__all__ = ["SampleKeeper", "find_no_series"]

_NO_SERIES = MetricsProblem(
    kind=MetricsReason.NO_SERIES,
    message="no running/waiting/KV series for any pod; check spec.engine, metric names and "
    "the namespace/pod label names",
)


@dataclass(frozen=True, kw_only=True)
class _Kept:
    sample: PodSample
    read_at: float


class SampleKeeper:
    """One pool's samples by member; times are on the loop's monotonic clock."""

    def __init__(self) -> None:
        self._kept: dict[PodName, _Kept] = {}

    def keep(
        self,
        *,
        members: Collection[PodName],
        fresh: Mapping[PodName, PodSample],
        now: float,
    ) -> dict[PodName, PodSample]:
        """Forget non-members, store ``fresh``, and return every kept sample aged to ``now``."""
        self._kept = {n: k for n, k in self._kept.items() if n in members}
        self._kept.update(
            {n: _Kept(sample=s, read_at=now) for n, s in fresh.items() if n in members}
        )
        return {name: _aged(kept, now=now) for name, kept in self._kept.items()}


def find_no_series(fresh: Mapping[PodName, PodSample]) -> MetricsProblem | None:
    """The source answered but knows none of the pods: wrong engine, metric or label names,
    or a scrape config that has not caught up. Not "available"."""
    if fresh and all(_empty(sample) for sample in fresh.values()):
        return _NO_SERIES
    return None


def _empty(sample: PodSample) -> bool:
    return sample.running is None and sample.waiting is None and sample.kv_usage is None


def _aged(kept: _Kept, *, now: float) -> PodSample:
    extra = now - kept.read_at
    if extra <= 0:
        return kept.sample
    base = kept.sample.age_s if kept.sample.age_s is not None else 0.0
    return replace(kept.sample, age_s=base + extra)
