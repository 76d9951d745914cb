"""Deliver a pool's decisions to its targets without ever blocking the pool's loop.

Each target gets a :class:`TargetDriver`: a named task that applies the *latest* decision
offered (older ones are superseded, never queued), with a timeout per attempt and an
exponential backoff after failures. The loop only calls :meth:`TargetSet.offer` and reads
:meth:`TargetSet.states`, so a hung Envoy or API server delays that target alone. An empty
decision (no Ready member) is never offered: the data plane keeps the last one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from trimtab import tasks
from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.balancing.membership import Member
from trimtab.errors import TargetSyncError
from trimtab.targets.base import Target, TargetState

__all__ = ["TargetDriver", "TargetFactory", "TargetSet"]

_PENDING = TargetState(synced=False, reason=TargetReason.PENDING, message="not applied yet")


class TargetFactory(Protocol):
    """The targets a pool's spec names; the same name must mean the same target object."""

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]: ...


@dataclass(frozen=True, kw_only=True)
class _Offer:
    spec: InferencePoolSpec
    decision: Decision
    endpoints: Mapping[PodName, Endpoint]


class TargetDriver:
    """Owns one target's apply task for one pool."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        target: Target,
        timeout_s: float,
        backoffs: Sequence[float],
        on_error: Callable[[str], None],
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self.target = target
        self._pool = pool
        self._timeout_s = timeout_s
        self._backoffs = backoffs
        self._on_error = on_error
        self._logger = logger
        self._offer: _Offer | None = None
        self._wakeup = asyncio.Event()
        self._state = _PENDING
        self._applied = False
        self._task = tasks.start(self._run(), name=f"target {target.name} of {pool}")

    def offer(
        self,
        *,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> None:
        self._offer = _Offer(spec=spec, decision=decision, endpoints=endpoints)
        self._wakeup.set()

    def state(self) -> TargetState:
        # After a successful apply the target knows better (an Envoy NACK arrives later).
        if self._applied:
            return self.target.state(pool=self._pool)
        return self._state

    async def stop(self, *, remove: bool) -> None:
        """Cancel the task; with ``remove`` also make the target forget the pool."""
        await tasks.stop(self._task)
        if remove:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await self.target.remove(pool=self._pool)
            except Exception as exc:  # a target we leave behind must not fail the others
                self._logger.warning(
                    "Could not remove %s from %s: %s", self._pool, self.target.name, exc
                )

    async def _run(self) -> None:
        failures = 0
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            offer = self._offer
            if offer is None:
                continue
            try:
                async with asyncio.timeout(self._timeout_s):
                    self._state = await self.target.apply(
                        pool=self._pool,
                        spec=offer.spec,
                        decision=offer.decision,
                        endpoints=offer.endpoints,
                    )
                self._applied = True
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._applied = False
                self._state = _failure(exc=exc, timeout_s=self._timeout_s)
                self._on_error(self.target.name)
                self._logger.warning("Target %s failed: %s", self.target.name, self._state.message)
                delay = self._backoffs[min(failures, len(self._backoffs) - 1)]
                failures += 1
                await asyncio.sleep(delay)
                self._wakeup.set()  # retry with whatever is latest by then


class TargetSet:
    """The drivers of one pool, reconciled against the targets its spec names."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        timeout_s: float,
        backoffs: Sequence[float],
        on_error: Callable[[str], None],
        logger: logging.Logger | logging.LoggerAdapter[logging.Logger],
    ) -> None:
        self._pool = pool
        self._timeout_s = timeout_s
        self._backoffs = backoffs
        self._on_error = on_error
        self._logger = logger
        self._drivers: dict[str, TargetDriver] = {}

    async def replace(self, targets: Sequence[Target]) -> None:
        """Keep drivers of targets still named, start new ones, remove the dropped ones."""
        wanted = {target.name: target for target in targets}
        for name in [name for name in self._drivers if name not in wanted]:
            await self._drivers.pop(name).stop(remove=True)
        for name, target in wanted.items():
            if name not in self._drivers:
                self._drivers[name] = TargetDriver(
                    pool=self._pool,
                    target=target,
                    timeout_s=self._timeout_s,
                    backoffs=self._backoffs,
                    on_error=self._on_error,
                    logger=self._logger,
                )

    def offer(
        self, *, spec: InferencePoolSpec, decision: Decision, members: Sequence[Member]
    ) -> None:
        """Hand ``decision`` to every driver, unless it is empty."""
        if not decision.pods:
            return
        endpoints = {m.endpoint.name: m.endpoint for m in members}
        for driver in self._drivers.values():
            driver.offer(spec=spec, decision=decision, endpoints=endpoints)

    def states(self) -> list[tuple[str, TargetState]]:
        return [(name, driver.state()) for name, driver in sorted(self._drivers.items())]

    async def stop(self, *, remove: bool) -> None:
        for driver in self._drivers.values():
            await driver.stop(remove=remove)
        self._drivers.clear()


def _failure(*, exc: Exception, timeout_s: float) -> TargetState:
    if isinstance(exc, TargetSyncError):
        return TargetState(synced=False, reason=exc.reason, message=str(exc)[:256])
    if isinstance(exc, TimeoutError):
        return TargetState(
            synced=False, reason=TargetReason.TIMEOUT, message=f"no answer in {timeout_s}s"
        )
    # An unexpected error is a bug in the target; keep the message short for status and events.
    return TargetState(
        synced=False, reason=TargetReason.TARGET_ERROR, message=f"{type(exc).__name__}: {exc}"[:256]
    )
