"""Latency percentiles and KV imbalance, shared by the simulator and the demo so that their
results are comparable key for key.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Percentiles", "finite", "imbalance"]

# Samples where the fleet's mean KV usage is below this are idle and say nothing about balance.
_BUSY_KV = 0.01


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """p50/p90/p95/p99 of a latency, seconds (NaN when there were no requests)."""

    p50: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: npt.ArrayLike) -> Percentiles:
        found = np.asarray(values, dtype=np.float64)
        if found.size == 0:
            return cls(p50=np.nan, p90=np.nan, p95=np.nan, p99=np.nan)
        p50, p90, p95, p99 = np.percentile(found, [50, 90, 95, 99])
        return cls(p50=float(p50), p90=float(p90), p95=float(p95), p99=float(p99))

    def flat(self, prefix: str) -> dict[str, float | None]:
        """``{prefix}_p50`` ... ``{prefix}_p99``, NaN as ``None`` (JSON has no NaN)."""
        return {
            f"{prefix}_p50": finite(self.p50),
            f"{prefix}_p90": finite(self.p90),
            f"{prefix}_p95": finite(self.p95),
            f"{prefix}_p99": finite(self.p99),
        }


def finite(value: float) -> float | None:
    """``value``, or ``None`` where it is NaN or infinite."""
    return value if np.isfinite(value) else None


def imbalance(kv_usage: npt.ArrayLike) -> float:
    """Time average of max/mean KV usage across replicas over busy samples (1 = even).

    ``kv_usage`` has one row per sample and one column per replica.
    """
    kv = np.asarray(kv_usage, dtype=np.float64)
    if kv.size == 0:
        return 1.0
    mean = kv.mean(axis=1)
    busy = mean > _BUSY_KV
    if not np.any(busy):
        return 1.0
    return float(np.mean(kv[busy].max(axis=1) / mean[busy]))
