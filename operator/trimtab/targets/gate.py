"""The xDS ready gate: a restarted trimtab serves Envoy only once its pools have decided.

Envoy takes whatever a (re)connected server sends first, so the cache stays closed until every
known pool has a restored or fresh decision; a deadline bounds the wait.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from trimtab.api.records import PoolKey
from trimtab.targets.xds.cache import SnapshotCache

__all__ = ["XdsGate"]

logger = logging.getLogger(__name__)


class XdsGate:
    """Opens the xDS cache once every known pool has decided once (or after a deadline).

    Pools register when the operator first sees them and settle after their first tick
    (whatever its outcome: an invalid pool or one with no Ready pods has nothing to restore).
    ``grace_s`` covers pools not listed yet at startup; ``deadline_s`` bounds the wait.
    """

    def __init__(
        self,
        *,
        cache: SnapshotCache,
        grace_s: float = 2.0,
        deadline_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cache = cache
        self._clock = clock
        self._started = clock()
        self._grace_s = grace_s
        self._deadline_s = deadline_s
        self._pending: set[PoolKey] = set()

    def expect(self, pool: PoolKey) -> None:
        if not self._cache.ready:
            self._pending.add(pool)

    def settle(self, pool: PoolKey) -> None:
        self._pending.discard(pool)
        self.check()

    def check(self) -> None:
        """Open if due; called after every pool tick and by the operator's timer."""
        if self._cache.ready:
            return
        waited = self._clock() - self._started
        if not self._pending and waited >= self._grace_s:
            logger.info("xDS serves from now on: every known pool has a decision")
            self._cache.open()
        elif waited >= self._deadline_s:
            logger.info(
                "xDS serves from now on: %d pools still had no decision after %gs",
                len(self._pending),
                self._deadline_s,
            )
            self._cache.open()
