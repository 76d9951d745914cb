"""One pool's balancing loop: membership → metrics → policy → targets → report.

:class:`PoolLoop` is level-triggered and idempotent: every tick it reads the whole current
state (spec, Ready members, samples) and enforces all of it, so create, update, resume and a
plain tick are the same code. It knows nothing of kopf; the operator and local mode differ
only in the :class:`~trimtab.balancing.membership.MembershipProvider` and :class:`PoolSink`
they pass in. Invariants: a Ready member is never dropped for missing or stale metrics (its
last sample is passed on with a growing age and the policy decays it to equal weight); an
empty decision is never pushed to targets; target applies and status writes never block it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from trimtab import policy
from trimtab.api.records import (
    Decision,
    Endpoint,
    PodDecision,
    PodInput,
    PodName,
    PodSample,
    PodState,
    PoolKey,
)
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.status import InferencePoolStatus
from trimtab.api.validation import parse_spec
from trimtab.balancing.applying import TargetSet
from trimtab.balancing.mapping import settings_from_spec
from trimtab.balancing.membership import Member, MembershipProvider, ready_for_s
from trimtab.balancing.reporting import (
    NO_SERIES_REASON,
    Observation,
    Report,
    Reporter,
    ReportSettings,
)
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.balancing.telemetry import PoolTelemetry
from trimtab.errors import SourceUnavailable, SpecInvalid
from trimtab.metrics.source import MetricsSource
from trimtab.targets.base import Target

__all__ = [
    "LoopSettings",
    "PoolLoop",
    "PoolSink",
    "SourceFactory",
    "TargetFactory",
    "decision_from_status",
]

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


class SourceFactory(Protocol):
    """Builds a pool's metrics source (resolving secrets where the runtime has them)."""

    async def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> MetricsSource: ...


class TargetFactory(Protocol):
    """The targets a pool's spec names; the same name must mean the same target object."""

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]: ...


class PoolSink(Protocol):
    """Where a pool's reports go: the API server (leader only), or a file in local mode."""

    def publish(
        self, *, report: Report, confirm: Callable[[InferencePoolStatus], None]
    ) -> Sequence[str]:
        """Hand over a report without blocking; call ``confirm`` once its status is written.

        Returns the reasons of the events actually posted.
        """
        ...

    async def close(self, *, deleted: bool) -> None: ...


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    target_timeout_s: float = 10.0
    """Deadline of one target apply."""
    target_backoffs: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 30.0)
    """Seconds between retries of a failing target, the last one repeating."""
    read_timeout_floor_s: float = 5.0
    """Least deadline of one metrics read (the interval when that is longer)."""
    invalid_recheck_s: float = 5.0
    """Tick period while the spec is invalid (no interval to go by)."""
    report: ReportSettings = field(default_factory=ReportSettings)


@dataclass(frozen=True, kw_only=True)
class _Kept:
    sample: PodSample
    read_at: float


class PoolLoop:
    """Owns one pool's metrics source, target drivers, reporter and telemetry."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        raw_spec: Mapping[str, Any],
        generation: int | None,
        membership: MembershipProvider,
        sources: SourceFactory,
        targets: TargetFactory,
        sink: PoolSink,
        spam: SpamFilter,
        settings: LoopSettings,
        logger: Logger,
        seed: InferencePoolStatus | None = None,
        on_step: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.pool = pool
        self._raw: Mapping[str, Any] = raw_spec
        self._generation = generation
        self._membership = membership
        self._sources = sources
        self._target_factory = targets
        self._sink = sink
        self._settings = settings
        self._logger = logger
        self._clock = clock
        self._wall = wall
        self._wakeup = asyncio.Event()
        self._on_step = on_step
        self._telemetry = PoolTelemetry(pool=pool)
        self._targets = TargetSet(
            pool=pool,
            timeout_s=settings.target_timeout_s,
            backoffs=settings.target_backoffs,
            on_error=lambda name: self._telemetry.count_sync_error(target=name),
            logger=logger,
        )
        self._reporter = Reporter(
            pool=pool, spam=spam, settings=settings.report, clock=clock, wall=wall, seed=seed
        )
        self._parsed_raw: Mapping[str, Any] | None = None
        self._spec: InferencePoolSpec | None = None
        self._policy: policy.PolicySettings | None = None
        self._problems: tuple[str, ...] = ()
        self._source: MetricsSource | None = None
        self._source_error: str | None = None
        self._kept: dict[PodName, _Kept] = {}
        self._previous = decision_from_status(seed)
        self._decided_at = clock()

    def update(self, *, raw_spec: Mapping[str, Any], generation: int | None) -> None:
        """A new spec (or generation): applied on the next tick, which starts right away."""
        if raw_spec != self._raw or generation != self._generation:
            self._raw, self._generation = raw_spec, generation
            self._wakeup.set()

    async def run(self) -> None:
        """Tick until cancelled; an unexpected error in one tick is logged, not fatal."""
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:
                self._logger.exception("Balancing tick of %s failed; retrying", self.pool)
            self._on_step()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._period()):
                    await self._wakeup.wait()
            self._wakeup.clear()

    async def step(self) -> None:
        """One tick. Level-triggered: the same inputs give the same outputs and no writes."""
        if self._raw != self._parsed_raw:
            await self._reconfigure()
        if self._problems or self._spec is None or self._policy is None:
            self._publish(Observation(generation=self._generation, spec_problems=self._problems))
            return
        spec, settings = self._spec, self._policy
        members = list(self._membership.members(spec=spec))
        samples, error = await self._read(spec=spec, members=members)
        decision = self._decide(
            members=members, samples=samples, settings=settings, metrics_ok=error is None
        )
        if decision.pods:
            endpoints = {m.endpoint.name: m.endpoint for m in members}
            self._targets.offer(spec=spec, decision=decision, endpoints=endpoints)
        observation = Observation(
            generation=self._generation,
            members=members,
            decision=decision,
            samples=samples,
            metrics_error=error,
            targets=self._targets.states(),
        )
        self._publish(observation)

    async def close(self, *, deleted: bool) -> None:
        """Stop everything this loop owns; ``deleted`` also clears targets and series."""
        try:
            await self._targets.stop(remove=deleted)
            if self._source is not None:
                await self._source.aclose()
                self._source = None
        finally:
            await self._sink.close(deleted=deleted)
            self._telemetry.forget()

    def _period(self) -> float:
        if self._spec is None:
            return self._settings.invalid_recheck_s
        return float(self._spec.metrics.interval)

    async def _reconfigure(self) -> None:
        raw = self._raw
        self._parsed_raw = raw
        try:
            spec = parse_spec(raw)
            settings = settings_from_spec(spec)
        except SpecInvalid as exc:
            self._problems = tuple(exc.problems)
            self._logger.warning("Spec of %s is invalid: %s", self.pool, exc)
            return
        self._problems = ()
        self._spec, self._policy = spec, settings
        if self._source is not None:
            await self._source.aclose()
            self._source = None
        try:
            self._source = await self._sources.build(pool=self.pool, spec=spec)
            self._source_error = None
        except Exception as exc:  # a missing Secret must not stop the weights from decaying
            self._source_error = f"cannot build metrics source: {exc}"[:256]
            self._logger.warning("%s", self._source_error)
        await self._targets.replace(self._target_factory.build(pool=self.pool, spec=spec))

    async def _read(
        self, *, spec: InferencePoolSpec, members: Sequence[Member]
    ) -> tuple[dict[PodName, PodSample], str | None]:
        endpoints: list[Endpoint] = [m.endpoint for m in members]
        error = self._source_error
        fresh: dict[PodName, PodSample] = {}
        if self._source is not None and endpoints:
            deadline = max(self._settings.read_timeout_floor_s, float(spec.metrics.interval))
            try:
                async with asyncio.timeout(deadline):
                    fresh = await self._source.read(endpoints=endpoints)
            except SourceUnavailable as exc:
                error = str(exc)[:256] or "metrics source unavailable"
            except TimeoutError:
                error = f"metrics read took longer than {deadline}s"
            else:
                if fresh and all(_empty(sample) for sample in fresh.values()):
                    # The source answered but knows none of the pods: wrong engine, metric or
                    # label names, or a scrape config that has not caught up. Not "available".
                    error = (
                        f"{NO_SERIES_REASON}: no running/waiting/KV series for any pod; check "
                        "spec.engine, metric names and the namespace/pod label names"
                    )
        now = self._clock()
        names = {e.name for e in endpoints}
        self._kept = {n: k for n, k in self._kept.items() if n in names}
        self._kept.update({n: _Kept(sample=s, read_at=now) for n, s in fresh.items() if n in names})
        return {name: _aged(kept, now=now) for name, kept in self._kept.items()}, error

    def _decide(
        self,
        *,
        members: Sequence[Member],
        samples: Mapping[PodName, PodSample],
        settings: policy.PolicySettings,
        metrics_ok: bool,
    ) -> Decision:
        now_wall = self._wall()
        inputs = [
            PodInput(
                name=m.endpoint.name,
                ready_for_s=ready_for_s(member=m, now=now_wall),
                sample=samples.get(m.endpoint.name),
            )
            for m in members
        ]
        started = time.perf_counter()
        now = self._clock()
        decision = policy.compute_decision(
            pods=inputs,
            previous=self._previous,
            settings=settings,
            elapsed_s=now - self._decided_at,
        )
        self._telemetry.observe_decision(
            decision=decision,
            samples=samples,
            ready_pods=len(members),
            metrics_available=metrics_ok,
            duration_s=time.perf_counter() - started,
        )
        self._decided_at = now
        if decision.pods:
            self._previous = decision
        return decision

    def _publish(self, observation: Observation) -> None:
        report = self._reporter.observe(observation)
        for reason in self._sink.publish(report=report, confirm=self._reporter.confirm_written):
            self._telemetry.count_event(reason=reason)


def _empty(sample: PodSample) -> bool:
    return sample.running is None and sample.waiting is None and sample.kv_usage is None


def _aged(kept: _Kept, *, now: float) -> PodSample:
    # A sample kept from an earlier read grows older with every tick it is reused, so the
    # policy's staleAfter sees the truth instead of the age it had when it was read.
    extra = now - kept.read_at
    if extra <= 0:
        return kept.sample
    base = kept.sample.age_s if kept.sample.age_s is not None else 0.0
    return replace(kept.sample, age_s=base + extra)


def decision_from_status(status: InferencePoolStatus | None) -> Decision | None:
    """The last decision a previous run wrote, so a restart continues from its weights."""
    if status is None or not status.pods:
        return None
    states = {str(s): s for s in PodState}
    pods = tuple(
        PodDecision(
            name=PodName(pod.name),
            weight=max(1, pod.weight),
            max_in_flight=max(1, pod.max_in_flight),
            state=states.get(pod.state, PodState.SERVING),
            reason=pod.reason,
        )
        for pod in status.pods
    )
    return Decision(pods=pods)
