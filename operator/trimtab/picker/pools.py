"""Each pool's admission behind an asyncio face: queued requests wait on futures.

:class:`PickerPools` maps a pool name (the Envoy cluster name, which the bootstrap also puts in
the ``x-trimtab-pool`` gRPC metadata of each route) to a :class:`PickerPool`. The operator calls
:meth:`PickerPools.update` every tick with the pool's pods and settings; requests call
:meth:`PickerPool.acquire` and, however they end, :meth:`PickerPool.release` exactly once.

The admission logic is pure and synchronous; everything here runs on one event loop, so no lock
is needed. Every outcome the admission hands back (grants dispatched by a release or an update,
refusals from expiry) goes to the waiting request's future; a grant whose request has already
left is released at once, so a slot is never stranded. One timer per pool, armed at
:meth:`Admission.next_deadline`, sheds requests that outlive the queue TTL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    AdmissionStats,
    Ask,
    Grant,
    PodCapacity,
    Queued,
    Refusal,
    RequestId,
)
from trimtab.picker.protocol import expand_subset

__all__ = ["AdmissionFactory", "Outcome", "PickerPool", "PickerPools"]

logger = logging.getLogger("trimtab.picker")

Outcome = Grant | Refusal
Clock = Callable[[], float]
AdmissionFactory = Callable[[AdmissionSettings], Admission]


def _new_admission(settings: AdmissionSettings) -> Admission:
    return Admission(settings=settings)


class PickerPool:
    """One pool's admission, its waiting requests and its expiry timer."""

    def __init__(
        self,
        *,
        name: str,
        settings: AdmissionSettings,
        clock: Clock,
        factory: AdmissionFactory = _new_admission,
    ) -> None:
        self.name = name
        self._clock = clock
        self._settings = settings
        self._admission = factory(settings)
        self._waiters: dict[RequestId, asyncio.Future[Outcome]] = {}
        self._addresses: frozenset[str] = frozenset()
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    @property
    def settings(self) -> AdmissionSettings:
        return self._settings

    @property
    def addresses(self) -> frozenset[str]:
        """``ip:port`` of every pod admission knows (for expanding subset hints)."""
        return self._addresses

    def stats(self) -> AdmissionStats:
        return self._admission.stats()

    async def acquire(self, *, ask: Ask) -> tuple[Outcome, bool]:
        """A grant or a refusal, waiting in the shared queue if need be; True if it waited.

        A cancelled caller leaves the queue; a grant that raced with the cancel is released.
        """
        outcome = self._admission.ask(ask=ask, now=self._clock())
        if not isinstance(outcome, Queued):
            return outcome, False
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        self._waiters[ask.id] = future
        self._arm()
        try:
            return await future, True
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(id=ask.id)
            else:
                self._admission.withdraw(id=ask.id)
                # Its place may have held back requests restricted to other pods.
                self._deliver(self._admission.dispatch(now=self._clock()))
            raise
        finally:
            self._waiters.pop(ask.id, None)

    def release(self, *, id: RequestId, output_tokens: int | None = None) -> None:
        """The request ended; idempotent (the admission ignores an unknown id)."""
        self._deliver(
            self._admission.release(id=id, now=self._clock(), output_tokens=output_tokens)
        )

    def moved(self, *, id: RequestId, address: str) -> None:
        """Envoy served the request elsewhere (a fallback): its slot follows it there."""
        self._deliver(self._admission.moved(id=id, address=address, now=self._clock()))

    def update(
        self, *, pods: Sequence[PodCapacity], settings: AdmissionSettings, now: float
    ) -> None:
        if settings != self._settings:
            self._settings = settings
            self._deliver(self._admission.configure(settings=settings, now=now))
        self._addresses = frozenset(pod.address for pod in pods)
        self._deliver(self._admission.set_pods(pods=pods, now=now))

    def close(self) -> None:
        """Stop the timer and drop waiting requests (their streams are being torn down)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for future in self._waiters.values():
            future.cancel()

    def _deliver(self, outcomes: Iterable[Outcome]) -> None:
        pending = list(outcomes)
        while pending:
            outcome = pending.pop()
            future = self._waiters.pop(outcome.id, None)
            if future is not None and not future.done():
                future.set_result(outcome)
            elif isinstance(outcome, Grant):
                # Nobody waits for it any more: give the slot back (which may grant the next).
                pending.extend(self._admission.release(id=outcome.id, now=self._clock()))
        self._arm()

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self._admission.next_deadline()
        if deadline is None or self._closed:
            return
        delay = max(0.0, deadline - self._clock())
        self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._timer = None
        now = self._clock()
        self._deliver([*self._admission.expire(now=now), *self._admission.dispatch(now=now)])


class PickerPools:
    """The pools the picker admits for, by name; the one pool is the default when alone.

    ``clock`` must be the clock of the ``now`` the operator passes to :meth:`update` and of the
    pods' ``kv_observed_at`` (``time.monotonic`` by default).
    """

    def __init__(
        self, *, clock: Clock = time.monotonic, factory: AdmissionFactory = _new_admission
    ) -> None:
        self._clock = clock
        self._factory = factory
        self._pools: dict[str, PickerPool] = {}

    def pools(self) -> tuple[PickerPool, ...]:
        return tuple(self._pools.values())

    def get(self, name: str | None) -> PickerPool | None:
        if name is not None:
            return self._pools.get(name)
        if len(self._pools) == 1:
            return next(iter(self._pools.values()))
        return None

    def holding(self, hint: Iterable[str]) -> PickerPool | None:
        """The only pool that knows an endpoint of ``hint`` (``ip:port`` or a bare IP)."""
        wanted = tuple(hint)
        found = [pool for pool in self._pools.values() if expand_subset(wanted, pool.addresses)]
        return found[0] if len(found) == 1 else None

    def update(
        self,
        *,
        pool: str,
        pods: Sequence[PodCapacity],
        settings: AdmissionSettings,
        now: float,
    ) -> None:
        """Create the pool on first sight, then refresh its pods and settings."""
        found = self._pools.get(pool)
        if found is None:
            found = PickerPool(
                name=pool, settings=settings, clock=self._clock, factory=self._factory
            )
            self._pools[pool] = found
            logger.info("Picker admits for pool %s", pool)
        found.update(pods=pods, settings=settings, now=now)

    def remove(self, *, pool: str) -> None:
        """Forget a pool (admission off, or the pool is gone): its requests go to the weights."""
        found = self._pools.pop(pool, None)
        if found is not None:
            found.close()
            logger.info("Picker no longer admits for pool %s", pool)

    def close(self) -> None:
        for found in self._pools.values():
            found.close()
        self._pools.clear()
