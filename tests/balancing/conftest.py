"""Fakes of the balancing core's own interfaces: membership, sink, and a target held in hand.

Time is the loop's: tests run under ``looptime`` and hand the pieces the loop clock, so a
30-second backoff takes no real time and assertions can name exact instants.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.membership import Member
from trimtab.balancing.reporting import Report
from trimtab.errors import TargetSyncError
from trimtab.targets.base import TargetState

POOL = PoolKey("serving", "llama")
EPOCH = datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)

SPEC: dict[str, Any] = {
    "selector": {"matchLabels": {"app": "vllm"}},
    "targets": [{"envoy": {"cluster": "llama"}}],
    "metrics": {"interval": "2s", "staleAfter": "10s"},
    "policy": {"slowStart": "0s", "smoothing": "0s"},
}


def loop_clock() -> Callable[[], float]:
    loop = asyncio.get_running_loop()
    return loop.time


def loop_wall() -> Callable[[], datetime.datetime]:
    """Wall time that moves with the (fake) loop time, from a fixed epoch."""
    loop = asyncio.get_running_loop()
    return lambda: EPOCH + datetime.timedelta(seconds=loop.time())


def member(name: str, *, ip: str = "10.0.0.1") -> Member:
    return Member(endpoint=Endpoint(PodName(name), ip, 8000), ready_since=None)


@dataclass
class FakeMembership:
    current: list[Member] = field(default_factory=list)
    failing: bool = False

    def members(self, *, spec: InferencePoolSpec) -> Sequence[Member]:
        if self.failing:
            raise RuntimeError("index broken")
        return list(self.current)


@dataclass
class FakeSink:
    """Records every report; confirms writes unless told the API server is failing."""

    reports: list[Report] = field(default_factory=list)
    written: list[InferencePoolStatus] = field(default_factory=list)
    confirming: bool = True
    closed: list[bool] = field(default_factory=list)

    def publish(
        self, *, report: Report, confirm: Callable[[InferencePoolStatus], None]
    ) -> Sequence[str]:
        self.reports.append(report)
        if report.write and self.confirming:
            self.written.append(report.status)
            confirm(report.status)
        return [event.reason for event in report.events]

    async def close(self, *, deleted: bool) -> None:
        self.closed.append(deleted)

    @property
    def last(self) -> Report:
        return self.reports[-1]

    def condition(self, kind: str) -> tuple[str, str]:
        found = next(c for c in self.last.status.conditions if c.type == kind)
        return found.status, found.reason

    def event_reasons(self) -> list[str]:
        return [event.reason for report in self.reports for event in report.events]


class HeldTarget:
    """A target whose applies the test controls: each waits for ``release`` (if held) and
    fails while ``failing``; the loop time and decision of every attempt are recorded."""

    def __init__(self, label: str = "held") -> None:
        self.label = label
        self.held = False
        self.failing = False
        self.attempts: list[tuple[float, Decision]] = []
        self.applied: list[Decision] = []
        self.removed: list[PoolKey] = []
        self.remove_fails = False
        self._release = asyncio.Event()

    @property
    def name(self) -> str:
        return self.label

    def release(self) -> None:
        self._release.set()

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        self.attempts.append((asyncio.get_running_loop().time(), decision))
        if self.held:
            await self._release.wait()
            self._release.clear()
        if self.failing:
            raise TargetSyncError("envoy unreachable", reason=TargetReason.TARGET_SYNC_FAILED)
        self.applied.append(decision)
        return TargetState(True, TargetReason.SYNCED)

    def state(self, *, pool: PoolKey) -> TargetState:
        return TargetState(True, TargetReason.SYNCED, "held target has it")

    async def remove(self, *, pool: PoolKey) -> None:
        if self.remove_fails:
            raise RuntimeError("cannot remove")
        self.removed.append(pool)


@pytest.fixture()
def membership() -> FakeMembership:
    return FakeMembership(current=[member("a", ip="10.0.0.1"), member("b", ip="10.0.0.2")])


@pytest.fixture()
def sink() -> FakeSink:
    return FakeSink()
