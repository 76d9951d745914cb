"""Per pool and reason event rate limiting, like client-go's EventSourceObjectSpamFilter.

Each (pool, reason) pair has a token bucket: a burst (10 by default) passes at once, then
one event per refill period (five minutes). A flapping pod or a dying Prometheus therefore
produces a handful of events, not one per metrics interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from trimtab.api.records import PoolKey

__all__ = ["SpamFilter"]


@dataclass
class _Bucket:
    tokens: float
    updated: float


class SpamFilter:
    """Token buckets keyed by pool and reason; :meth:`allow` spends one token."""

    def __init__(
        self, *, burst: int = 10, refill_s: float = 300.0, clock: Callable[[], float]
    ) -> None:
        self._burst = burst
        self._refill_s = refill_s
        self._clock = clock
        self._buckets: dict[tuple[PoolKey, str], _Bucket] = {}

    def allow(self, *, pool: PoolKey, reason: str) -> bool:
        now = self._clock()
        bucket = self._buckets.setdefault((pool, reason), _Bucket(tokens=self._burst, updated=now))
        bucket.tokens = min(self._burst, bucket.tokens + (now - bucket.updated) / self._refill_s)
        bucket.updated = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def forget(self, *, pool: PoolKey) -> None:
        """Drop a deleted pool's buckets so memory stays flat in the number of pools."""
        for key in [key for key in self._buckets if key[0] == pool]:
            del self._buckets[key]
