"""Run the demo's modes one after another on the same arrivals and collect their results.

Each mode gets a fresh :class:`~trimtab_lab.processes.ProcessGroup`: emulators (cold, so no
mode inherits another's queues), Envoy and, for trimtab, the operator. The load generator
replays the same wall-clock arrivals through Envoy while a watcher scrapes the replicas and a
meter reads CPU use. Whatever happens (end, error, Ctrl-C), the group stops every process
before the next mode starts or the error propagates.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trimtab_lab.demo.cpu import CpuMeter
from trimtab_lab.demo.live import LiveState
from trimtab_lab.demo.loadgen import Outcome, RequestSpec, replay
from trimtab_lab.demo.stack import Mode, StackPlan, start_stack
from trimtab_lab.demo.summary import summarise_mode
from trimtab_lab.demo.watching import FleetWatcher, Sample
from trimtab_lab.processes import ProcessGroup

__all__ = ["DemoPlan", "LoopLag", "ModeRun", "run_demo"]

# Beat of the loop-lag probe: short enough to catch a stall of a few tens of milliseconds.
_LAG_BEAT_S = 0.02


@dataclass(frozen=True, kw_only=True)
class DemoPlan:
    stack: StackPlan
    requests: Sequence[RequestSpec]
    """Arrivals in wall seconds, the same for every mode."""
    deadline_s: float
    """Wall seconds after the first arrival at which open requests are cut."""
    out: Path
    modes: tuple[Mode, ...] = tuple(Mode)
    watch_interval_s: float = 0.5


@dataclass(frozen=True, kw_only=True)
class ModeRun:
    mode: Mode
    outcomes: list[Outcome]
    samples: list[Sample]
    result: dict[str, Any]
    """The simulator's keys for this mode (see :mod:`trimtab_lab.demo.summary`)."""
    notes: tuple[str, ...] = field(default=())


class LoopLag:
    """The longest a short sleep overran in this process: the load generator's own lag.

    A lag of hundreds of milliseconds means TTFTs measure the generator, not the balancer.
    """

    def __init__(self) -> None:
        self.max_s = 0.0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(_LAG_BEAT_S)
            self.max_s = max(self.max_s, loop.time() - before - _LAG_BEAT_S)


async def run_demo(*, plan: DemoPlan, live: LiveState | None = None) -> list[ModeRun]:
    """Every mode of ``plan`` in turn; raises ``ComponentFailed`` if a component cannot start."""
    live = live or LiveState()
    live.modes = len(plan.modes)
    live.speeds = plan.stack.speeds
    runs = []
    for index, mode in enumerate(plan.modes, start=1):
        live.mode, live.mode_index, live.phase = mode.value, index, "starting"
        live.done = live.failed = 0
        runs.append(await _run_mode(plan=plan, mode=mode, live=live))
    return runs


async def _run_mode(*, plan: DemoPlan, mode: Mode, live: LiveState) -> ModeRun:
    workdir = plan.out / "run" / mode.value
    async with ProcessGroup(log_dir=workdir / "logs") as group:
        stack = await start_stack(group=group, plan=plan.stack, mode=mode, workdir=workdir)
        watcher = FleetWatcher(urls=stack.replica_urls, interval_s=plan.watch_interval_s)
        live.watcher, live.phase = watcher, "replaying"
        live.done = live.failed = 0
        live.sent_total = len(plan.requests)

        def count(outcome: Outcome) -> None:
            live.done += 1
            live.failed += 0 if outcome.ok else 1

        meter = CpuMeter(pids={**stack.pids, "demo": os.getpid()})
        lag = LoopLag()
        watching = asyncio.create_task(watcher.run(), name=f"watch replicas ({mode.value})")
        lagging = asyncio.create_task(lag.run(), name=f"measure loop lag ({mode.value})")
        try:
            outcomes = await replay(
                url=stack.proxy_url,
                model=plan.stack.model,
                requests=plan.requests,
                deadline_s=plan.deadline_s,
                on_done=count,
            )
        finally:
            watching.cancel()
            lagging.cancel()
            await asyncio.gather(watching, lagging, return_exceptions=True)
        cpu = meter.read()
        live.phase = "stopping"
    result = summarise_mode(
        policy=mode.value,
        outcomes=outcomes,
        samples=watcher.samples,
        time_scale=plan.stack.time_scale,
        deadline_s=plan.deadline_s,
        cpu=cpu,
        loop_lag_s=lag.max_s,
    )
    return ModeRun(
        mode=mode, outcomes=outcomes, samples=watcher.samples, result=result, notes=stack.notes
    )
