"""Fakes of trimtab's own interfaces (never of libraries): metrics sources and targets.

:class:`FakeMetrics` is one switchboard per test: the samples each pod reports, and whether
the whole source is down. :class:`RecordingTarget` keeps every decision it was given. Shared
by the operator tests (``tests/kube``) and the core's unit tests (``tests/balancing``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import SourceUnavailable, TargetSyncError
from trimtab.metrics.source import MetricsSource
from trimtab.targets.base import Target, TargetState


@dataclass
class FakeMetrics:
    samples: dict[str, PodSample] = field(default_factory=dict)
    down: bool = False
    default: PodSample = field(
        default_factory=lambda: PodSample(running=1, waiting=0, kv_usage=0.2, age_s=0.0)
    )


class FakeSource:
    def __init__(self, metrics: FakeMetrics) -> None:
        self._metrics = metrics

    async def read(self, *, endpoints: Sequence[Endpoint]) -> dict[PodName, PodSample]:
        if self._metrics.down:
            raise SourceUnavailable("prometheus: connection refused")
        return {e.name: self._metrics.samples.get(e.name, self._metrics.default) for e in endpoints}

    async def aclose(self) -> None:
        return None


class FakeSources:
    def __init__(self, metrics: FakeMetrics) -> None:
        self.metrics = metrics

    async def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> MetricsSource:
        return FakeSource(self.metrics)


@dataclass
class RecordingTarget:
    label: str = "recording"
    applied: list[tuple[PoolKey, Decision]] = field(default_factory=list)
    removed: list[PoolKey] = field(default_factory=list)
    failing: bool = False

    @property
    def name(self) -> str:
        return self.label

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        if self.failing:
            raise TargetSyncError("envoy unreachable", reason=TargetReason.TARGET_SYNC_FAILED)
        self.applied.append((pool, decision))
        return TargetState(True, TargetReason.SYNCED)

    def state(self, *, pool: PoolKey) -> TargetState:
        if self.failing:
            return TargetState(False, TargetReason.TARGET_SYNC_FAILED)
        return TargetState(True, TargetReason.SYNCED)

    async def remove(self, *, pool: PoolKey) -> None:
        self.removed.append(pool)

    def last(self, pool: PoolKey) -> Decision | None:
        return next((d for p, d in reversed(self.applied) if p == pool), None)


class FakeTargets:
    def __init__(self, target: RecordingTarget) -> None:
        self.target = target

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]:
        return [self.target]
