"""Fixtures of the controller tests: the emulated API (``kube``) and a running operator."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio

from support.fakes import FakeMetrics, FakeSources, FakeTargets, RecordingTarget
from support.kube import Cluster, kube  # noqa: F401  # re-exported fixture
from trimtab.balancing.loop import LoopSettings
from trimtab.balancing.reporting import ReportSettings
from trimtab.kube.running import OperatorConfig, run_operator

NAMESPACE = "serving"
# Short periods so that every behaviour shows within a second or two; asserts poll instead.
FAST = LoopSettings(
    target_timeout_s=2.0,
    target_backoffs=(0.05, 0.1),
    read_timeout_floor_s=1.0,
    invalid_recheck_s=0.2,
    report=ReportSettings(min_write_interval_s=0.1, heartbeat_s=5.0),
)


async def eventually(check: Callable[[], Any], *, within: float = 15.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail with its last value."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        result = check()
        if result:
            return result
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met in {within}s; last value {result!r}")
        await asyncio.sleep(0.05)


@pytest.fixture()
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture()
def target() -> RecordingTarget:
    return RecordingTarget()


@pytest_asyncio.fixture()
async def operator(
    kube: Cluster,  # noqa: F811
    metrics: FakeMetrics,
    target: RecordingTarget,
) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """The real kopf operator against ``kube``; yields a function that stops it early."""
    stop = asyncio.Event()
    config = OperatorConfig(
        namespaces=[NAMESPACE], connection=kube.connection, loop=FAST, scanning=False
    )
    task = asyncio.create_task(
        run_operator(
            config=config, stop=stop, sources=FakeSources(metrics), targets=FakeTargets(target)
        ),
        name="operator under test",
    )

    async def halt() -> None:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=20)

    yield halt
    await halt()
