"""The pool loop, one tick at a time, with fake source, targets and sink on the loop's clock.

Aspects: a tick decides and offers the decision to the targets and reports Ready/metrics
conditions; members without metrics are kept and their samples age until stale; "no series"
and an unreachable, hung or unbuildable source each set MetricsAvailable=False with their own
reason; no Ready member means nothing is offered; an invalid spec is reported and fixed by an
update; a spec change rebuilds the source and the targets; ``run`` wakes at once on an update
and survives a failing tick; ``close`` stops the source, the targets and the sink.
Not covered here: kopf and the API server (tests/kube), real Envoy (tests/local, tests/e2e).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
import pytest_asyncio

from balancing.conftest import (
    POOL,
    SPEC,
    FakeMembership,
    FakeSink,
    HeldTarget,
    loop_clock,
    loop_wall,
)
from support.fakes import FakeMetrics, FakeSource, FakeSources, FakeTargets, RecordingTarget
from trimtab import tasks
from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.balancing.loop import LoopSettings, PoolLoop
from trimtab.balancing.reporting import ReportSettings
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.metrics.source import MetricsSource
from trimtab.targets.base import Target

pytestmark = pytest.mark.looptime

SETTINGS = LoopSettings(
    target_timeout_s=5.0,
    target_backoffs=(1.0,),
    read_timeout_floor_s=3.0,
    invalid_recheck_s=7.0,
    report=ReportSettings(min_write_interval_s=0.0),
)


class CountingSources(FakeSources):
    """Builds :class:`FakeSource` (or fails to, or builds one that never answers)."""

    def __init__(self, metrics: FakeMetrics) -> None:
        super().__init__(metrics)
        self.built: list[InferencePoolSpec] = []
        self.closed = 0
        self.refuse = False
        self.hang = False

    async def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> MetricsSource:
        if self.refuse:
            raise RuntimeError("Secret serving/prom-token not found")
        self.built.append(spec)
        return _Source(self)


class _Source(FakeSource):
    def __init__(self, owner: CountingSources) -> None:
        super().__init__(owner.metrics)
        self._owner = owner

    async def read(self, *, endpoints: Sequence[Endpoint]) -> dict[PodName, PodSample]:
        if self._owner.hang:
            await asyncio.Event().wait()
        return await super().read(endpoints=endpoints)

    async def aclose(self) -> None:
        self._owner.closed += 1


class NamedTargets:
    """One target per ``targets[].envoy`` entry, the same object for the same cluster."""

    def __init__(self) -> None:
        self.made: dict[str, RecordingTarget] = {}

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]:
        names = [t.envoy.cluster for t in spec.targets if t.envoy is not None]
        return [self.made.setdefault(n, RecordingTarget(label=f"envoy:{n}")) for n in names]


MakeLoop = Callable[..., PoolLoop]


@pytest.fixture()
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture()
def sources(metrics: FakeMetrics) -> CountingSources:
    return CountingSources(metrics)


@pytest.fixture()
def target() -> RecordingTarget:
    return RecordingTarget()


@pytest_asyncio.fixture()
async def make(
    membership: FakeMembership, sink: FakeSink, sources: CountingSources, target: RecordingTarget
) -> AsyncIterator[MakeLoop]:
    made: list[PoolLoop] = []

    def make(**overrides: Any) -> PoolLoop:
        options: dict[str, Any] = {
            "pool": POOL,
            "raw_spec": SPEC,
            "generation": 1,
            "membership": membership,
            "sources": sources,
            "targets": FakeTargets(target),
            "sink": sink,
            "spam": SpamFilter(clock=loop_clock()),
            "settings": SETTINGS,
            "logger": logging.getLogger("test.loop"),
            "clock": loop_clock(),
            "wall": loop_wall(),
        }
        loop = PoolLoop(**{**options, **overrides})
        made.append(loop)
        return loop

    yield make
    for loop in made:
        await loop.close(deleted=False)


async def settle() -> None:
    """Let the target drivers take what was offered."""
    await asyncio.sleep(0.01)


async def test_a_tick_offers_the_decision_and_reports_it(
    make: MakeLoop, sink: FakeSink, target: RecordingTarget
) -> None:
    await make().step()
    await settle()
    decision = target.last(POOL)
    assert decision is not None
    assert sorted(pod.name for pod in decision.pods) == ["a", "b"]
    assert sink.condition("Ready") == ("True", "Balancing")
    assert sink.condition("MetricsAvailable") == ("True", "MetricsRead")
    assert [pod.name for pod in sink.last.status.pods] == ["a", "b"]
    assert sink.last.write


async def test_a_member_without_fresh_metrics_is_kept_until_its_sample_is_stale(
    make: MakeLoop, sink: FakeSink, metrics: FakeMetrics
) -> None:
    loop = make()
    await loop.step()
    metrics.down = True
    states: list[list[str]] = []
    for _ in range(6):  # ticks 2 s apart: the last sample is 2, 4, ... 12 s old
        await asyncio.sleep(2.0)
        await loop.step()
        states.append([pod.state for pod in sink.last.status.pods])
    assert sink.condition("MetricsAvailable") == ("False", "SourceUnavailable")
    assert states[3] == ["Serving", "Serving"]  # 8 s old, staleAfter is 10 s
    assert states[5] == ["Stale", "Stale"]  # 12 s old


async def test_no_series_for_any_pod_is_its_own_reason(
    make: MakeLoop, sink: FakeSink, metrics: FakeMetrics
) -> None:
    metrics.default = PodSample()
    await make().step()
    assert sink.condition("MetricsAvailable") == ("False", "NoSeries")
    assert "spec.engine" in sink.last.events[0].message


async def test_a_hung_source_times_out_after_the_floor(
    make: MakeLoop, sink: FakeSink, sources: CountingSources
) -> None:
    sources.hang = True
    loop = make()
    started = asyncio.get_running_loop().time()
    await loop.step()
    assert asyncio.get_running_loop().time() - started == pytest.approx(3.0)  # floor > interval
    assert sink.condition("MetricsAvailable") == ("False", "SourceUnavailable")
    assert "took longer than 3.0s" in sink.last.events[0].message


async def test_a_source_that_cannot_be_built_still_decides(
    make: MakeLoop, sink: FakeSink, sources: CountingSources, target: RecordingTarget
) -> None:
    sources.refuse = True
    await make().step()
    await settle()
    assert sink.condition("MetricsAvailable") == ("False", "SourceUnavailable")
    assert "cannot build metrics source" in sink.last.events[0].message
    assert target.last(POOL) is not None  # equal weights rather than nothing


async def test_no_ready_member_offers_nothing(
    make: MakeLoop, sink: FakeSink, membership: FakeMembership, target: RecordingTarget
) -> None:
    loop = make()
    await loop.step()
    await settle()
    membership.current = []
    await loop.step()
    await settle()
    assert len(target.applied) == 1  # the last real decision stays with the target
    assert sink.condition("Ready") == ("False", "NoReadyPods")
    assert "NoReadyPods" in sink.event_reasons()


async def test_an_invalid_spec_is_reported_until_an_update_fixes_it(
    make: MakeLoop, sink: FakeSink, sources: CountingSources, target: RecordingTarget
) -> None:
    loop = make(raw_spec={**SPEC, "policy": {"kvLowWatermark": 0.95}})
    await loop.step()
    assert sink.condition("Ready") == ("False", "SpecInvalid")
    assert sink.event_reasons() == ["SpecInvalid"]
    assert sources.built == []
    loop.update(raw_spec=SPEC, generation=2)
    await loop.step()
    await settle()
    assert sink.condition("Ready") == ("True", "Balancing")
    assert sink.last.status.observed_generation == 2
    assert len(sources.built) == 1
    assert target.last(POOL) is not None


async def test_a_spec_change_rebuilds_the_source_and_the_targets(
    make: MakeLoop, sources: CountingSources
) -> None:
    targets = NamedTargets()
    loop = make(targets=targets)
    await loop.step()
    await settle()
    changed = {**SPEC, "targets": [{"envoy": {"cluster": "other"}}]}
    loop.update(raw_spec=changed, generation=2)
    await loop.step()
    await settle()
    assert (len(sources.built), sources.closed) == (2, 1)
    assert targets.made["llama"].removed == [POOL]
    assert targets.made["other"].last(POOL) is not None
    await loop.step()  # an unchanged spec is not parsed again
    assert len(sources.built) == 2


async def test_run_wakes_at_once_on_an_update_and_survives_a_failing_tick(
    make: MakeLoop, sink: FakeSink, membership: FakeMembership
) -> None:
    clock = loop_clock()
    loop = make()
    ticks: list[float] = []
    membership.failing = True
    loop_task = tasks.start(_run(loop, ticks, clock), name="pool loop under test")
    try:
        await asyncio.sleep(3.0)  # ticks at 0 (fails) and 2
        membership.failing = False
        await asyncio.sleep(0.5)
        loop.update(raw_spec={**SPEC, "metrics": {"interval": "5s"}}, generation=2)
        await asyncio.sleep(0.1)
    finally:
        await tasks.stop(loop_task)
    start = ticks[0]
    assert [round(t - start, 3) for t in ticks] == [0.0, 2.0, 3.5]
    assert len(sink.reports) == 1  # the tick at 0 and 2 failed before reporting


async def _run(loop: PoolLoop, ticks: list[float], clock: Callable[[], float]) -> None:
    original = loop.step

    async def step() -> None:
        ticks.append(clock())
        await original()

    loop.step = step  # type: ignore[method-assign]
    await loop.run()


async def test_close_on_delete_removes_the_pool_everywhere(
    membership: FakeMembership, sink: FakeSink, sources: CountingSources
) -> None:
    target = HeldTarget()
    loop = PoolLoop(
        pool=POOL,
        raw_spec=SPEC,
        generation=1,
        membership=membership,
        sources=sources,
        targets=FakeTargets(target),  # type: ignore[arg-type]
        sink=sink,
        spam=SpamFilter(clock=loop_clock()),
        settings=SETTINGS,
        logger=logging.getLogger("test.loop"),
        clock=loop_clock(),
        wall=loop_wall(),
    )
    await loop.step()
    await loop.close(deleted=True)
    assert target.removed == [POOL]
    assert sources.closed == 1
    assert sink.closed == [True]


async def test_a_restart_continues_from_the_written_weights(
    make: MakeLoop, sink: FakeSink, metrics: FakeMetrics, target: RecordingTarget
) -> None:
    first = make(raw_spec={**SPEC, "policy": {"slowStart": "0s", "smoothing": "30s"}})
    metrics.samples = {"a": PodSample(running=1, waiting=0, kv_usage=0.95, age_s=0.0)}
    for _ in range(20):
        await first.step()
        await asyncio.sleep(2.0)
    weights = {pod.name: pod.weight for pod in sink.last.status.pods}
    assert weights["a"] < weights["b"]
    second = make(
        raw_spec={**SPEC, "policy": {"slowStart": "0s", "smoothing": "30s"}},
        seed=sink.last.status,
    )
    metrics.samples = {}  # equal load now: smoothing moves from the seed, not from equal
    await second.step()
    restarted = {pod.name: pod.weight for pod in sink.last.status.pods}
    assert restarted["a"] < restarted["b"]
