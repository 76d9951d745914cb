"""One pool's balancing loop: membership → metrics → policy → targets → report.

:class:`PoolLoop` is level-triggered and idempotent: every tick it reads the whole current
state (spec, Ready members, samples) and enforces all of it, so create, update, resume and a
plain tick are the same code. It knows nothing of kopf; the operator and local mode differ
only in the :class:`~trimtab.balancing.membership.MembershipProvider` and
:class:`~trimtab.balancing.reporting.PoolSink` they pass in. Each job is its own piece: the
spec (:mod:`.configuring`), the source (:mod:`.reading`), the samples (:mod:`.samples`), the
decision (:mod:`.deciding`), the targets (:mod:`.applying`) and the report
(:mod:`.reporting`). Invariants: a Ready member is never dropped for missing or stale metrics;
an empty decision is never pushed to targets; target applies and status writes never block it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trimtab.api.records import PoolKey
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.admitting import AdmissionFeed
from trimtab.balancing.applying import TargetFactory, TargetSet
from trimtab.balancing.configuring import PoolConfig, SpecTracker
from trimtab.balancing.deciding import Decider
from trimtab.balancing.membership import MembershipProvider
from trimtab.balancing.observations import Observation
from trimtab.balancing.reading import MetricsReader, SourceFactory
from trimtab.balancing.reporting import PoolSink, Reporter, ReportSettings
from trimtab.balancing.samples import SampleKeeper, find_no_series
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.balancing.telemetry import PoolTelemetry
from trimtab.errors import NotAllowed

__all__ = ["LoopSettings", "PoolLoop", "PoolSink", "SourceFactory", "TargetFactory"]

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


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
        admission: AdmissionFeed | None = None,
        on_step: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.pool = pool
        self._membership = membership
        self._target_factory = targets
        self._sink = sink
        self._settings = settings
        self._logger = logger
        self._clock = clock
        self._wakeup = asyncio.Event()
        self._on_step = on_step
        self._admission = admission
        self._telemetry = PoolTelemetry(pool=pool)
        self._spec = SpecTracker(pool=pool, raw_spec=raw_spec, generation=generation, logger=logger)
        self._reader = MetricsReader(
            pool=pool, sources=sources, floor_s=settings.read_timeout_floor_s, logger=logger
        )
        self._samples = SampleKeeper()
        self._decider = Decider(telemetry=self._telemetry, seed=seed, clock=clock, wall=wall)
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

    def update(self, *, raw_spec: Mapping[str, Any], generation: int | None) -> None:
        """A new spec (or generation): applied on the next tick, which starts right away."""
        if self._spec.update(raw_spec=raw_spec, generation=generation):
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
        changed = self._spec.reparse()
        if changed is not None:
            await self._reconfigure(changed)
        config = self._spec.usable
        generation = self._spec.generation
        if config is None:
            self._report(Observation(generation=generation, spec_problems=self._spec.problems))
            return
        members = list(self._membership.members(spec=config.spec))
        reading = await self._reader.read(
            endpoints=[m.endpoint for m in members], interval_s=float(config.spec.metrics.interval)
        )
        problem = reading.problem or find_no_series(reading.fresh)
        samples = self._samples.keep(
            members={m.endpoint.name for m in members}, fresh=reading.fresh, now=self._clock()
        )
        decision = self._decider.decide(
            members=members, samples=samples, settings=config.policy, metrics_ok=problem is None
        )
        self._targets.offer(spec=config.spec, decision=decision, members=members)
        admitted = None
        if self._admission is not None:
            admitted = self._admission.offer(
                pool=self.pool,
                spec=config.spec,
                decision=decision,
                members=members,
                samples=samples,
                now=self._clock(),
            )
        observation = Observation(
            generation=generation,
            members=members,
            decision=decision,
            samples=samples,
            metrics_problem=problem,
            targets=self._targets.states(),
            admission=admitted,
        )
        self._report(observation)

    async def close(self, *, deleted: bool) -> None:
        """Stop everything this loop owns; ``deleted`` also clears targets and series."""
        if self._admission is not None:
            self._admission.forget(pool=self.pool)
        try:
            await self._targets.stop(remove=deleted)
            await self._reader.aclose()
        finally:
            await self._sink.close(deleted=deleted)
            self._telemetry.forget()

    def _period(self) -> float:
        config = self._spec.last_valid
        if config is None:
            return self._settings.invalid_recheck_s
        return float(config.spec.metrics.interval)

    async def _reconfigure(self, config: PoolConfig) -> None:
        try:
            await self._reader.rebuild(spec=config.spec)
            targets = self._target_factory.build(pool=self.pool, spec=config.spec)
        except NotAllowed as exc:
            # Unlike a missing Secret this does not heal: refused until the spec changes.
            self._spec.refuse(exc.problems)
            await self._reader.aclose()
            return
        await self._targets.replace(targets)

    def _report(self, observation: Observation) -> None:
        report = self._reporter.observe(observation)
        for reason in self._sink.publish(report=report, confirm=self._reporter.confirm_written):
            self._telemetry.count_event(reason=reason)
