"""Counter rates from successive scrapes, for the direct source.

Prometheus computes ``rate()`` itself; scraping pods directly, trimtab keeps the previous
total per pod. A counter that went down means the engine restarted, and (as in Prometheus)
the new total is taken as the increase since zero. The first scrape of a pod has no rate.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from trimtab.api.records import PodName

__all__ = ["CounterRates"]


@dataclass(frozen=True, kw_only=True)
class _Reading:
    total: float
    at: float
    """Monotonic seconds."""


class CounterRates:
    """Per-pod memory of one counter's last total; not shared between pools."""

    def __init__(self) -> None:
        self._last: dict[PodName, _Reading] = {}

    def update(self, *, pod: PodName, total: float | None, at: float) -> float | None:
        """Record ``total`` seen at monotonic time ``at``; the rate per second since the last."""
        previous = self._last.pop(pod, None)
        if total is None:
            # A gap breaks the chain: the next total is compared with nothing rather than
            # with a reading from before the gap, which could span a restart.
            return None
        self._last[pod] = _Reading(total=total, at=at)
        if previous is None or at <= previous.at:
            return None
        increase = total - previous.total if total >= previous.total else total
        return increase / (at - previous.at)

    def retain(self, *, pods: Collection[PodName]) -> None:
        """Forget pods that left the pool, so memory follows membership."""
        for pod in set(self._last) - set(pods):
            del self._last[pod]
