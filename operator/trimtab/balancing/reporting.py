"""A pool's report each tick: the full status, whether to write it, and the events to post.

:class:`Reporter` joins "what changed" (:mod:`~trimtab.balancing.changes`: conditions and
transition events) with "how it is written" (:mod:`~trimtab.balancing.statuswrites`: the pod
table and the write throttle), and passes events through the per pool and reason
:class:`SpamFilter`. A :class:`PoolSink` (the API server, or a file locally) takes the result.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from trimtab.api.records import PoolKey
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.changes import ChangeTracker, PoolEvent
from trimtab.balancing.observations import Observation
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.balancing.statuswrites import WriteThrottle, with_decision

__all__ = ["PoolEvent", "PoolSink", "Report", "ReportSettings", "Reporter"]


@dataclass(frozen=True, kw_only=True)
class Report:
    status: InferencePoolStatus
    write: bool
    """Whether the status changed materially and is due (rate limit) for a write."""
    events: tuple[PoolEvent, ...]


@dataclass(frozen=True, kw_only=True)
class ReportSettings:
    min_write_interval_s: float = 5.0
    """Least seconds between two status writes for weight moves alone."""
    heartbeat_s: float = 60.0
    """Most seconds between two status writes, to refresh ``lastDecisionTime``."""
    weight_change: float = 0.1
    """Relative weight change that counts as material for the status."""
    rebalance_change: float = 0.25
    """Relative weight change since the last Rebalanced event that announces a new one."""


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


class Reporter:
    """Keeps one pool's status across ticks; ``seed`` is the status a previous run wrote."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        spam: SpamFilter,
        settings: ReportSettings,
        clock: Callable[[], float],
        wall: Callable[[], datetime.datetime],
        seed: InferencePoolStatus | None = None,
    ) -> None:
        self._pool = pool
        self._spam = spam
        self._wall = wall
        self._status = seed or InferencePoolStatus()
        self._changes = ChangeTracker(
            conditions=self._status.conditions, rebalance_change=settings.rebalance_change
        )
        self._writes = WriteThrottle(
            min_write_interval_s=settings.min_write_interval_s,
            heartbeat_s=settings.heartbeat_s,
            weight_change=settings.weight_change,
            clock=clock,
        )

    def observe(self, observation: Observation) -> Report:
        now = self._wall()
        changes = self._changes.observe(observation, now=now)
        status = self._status.model_copy(
            update={"observed_generation": observation.generation, "conditions": changes.conditions}
        )
        if not observation.spec_problems:
            status = with_decision(status=status, observation=observation, now=now)
        self._status = status
        events = tuple(
            e for e in changes.events if self._spam.allow(pool=self._pool, reason=e.reason)
        )
        write = self._writes.due(status=status, flipped=changes.flipped)
        return Report(status=status, write=write, events=events)

    def confirm_written(self, status: InferencePoolStatus) -> None:
        """Record a successful status write (a failed or skipped one is retried next tick)."""
        self._writes.confirm(status)
