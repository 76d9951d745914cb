"""Move a weight or cap from its previous value towards a target without thrashing Envoy.

Two mechanisms, both in log space because Envoy splits traffic by weight *ratios* (20 → 60
triples a pod's share, 960 → 1000 barely changes it): exponential smoothing with a time
constant, and a relative dead band inside which the previous value is kept. Both are monotonic
in the target, so they never turn more headroom into less weight.
"""

from __future__ import annotations

import math

__all__ = ["settle_cap", "settle_weight", "smoothing_factor"]


def smoothing_factor(*, elapsed_s: float, time_constant_s: float) -> float:
    """Share of the way to the target covered after ``elapsed_s``: 0 (stay) .. 1 (jump)."""
    if time_constant_s <= 0.0:
        return 1.0
    if math.isnan(elapsed_s) or elapsed_s <= 0.0:
        return 0.0
    return 1.0 - math.exp(-elapsed_s / time_constant_s)


def settle_weight(
    *,
    previous: int | None,
    target: float,
    alpha: float,
    dead_band: float,
    snap: bool,
    low: int,
    high: int,
) -> int:
    """The next integer weight in ``[low, high]``.

    ``dead_band`` is a relative change (0.05 = 5 %). Without ``snap`` a target within the band
    keeps the previous weight (hysteresis); with ``snap`` a value that has come within the band
    jumps onto the target, so a fixed target (stale pods → equal weights) is reached exactly.
    """
    target = min(float(high), max(float(low), target))
    if previous is None:
        return _to_int(value=target, low=low, high=high)
    start = float(min(high, max(low, previous)))
    band = math.log1p(dead_band)
    if not snap and target < high and abs(math.log(target / start)) <= band:
        return _to_int(value=start, low=low, high=high)
    moved = start * (target / start) ** alpha
    # The top of the scale is sticky: when every pod sits exactly on it, Envoy's weights are
    # equal and it switches to power-of-two-choices on live request counts, its best mode.
    snap = snap or target == high
    if snap and abs(math.log(target / moved)) <= band:
        moved = target
    return _to_int(value=moved, low=low, high=high)


def settle_cap(*, previous: int | None, target: int, dead_band: float) -> int:
    """Keep the previous cap unless the target differs by more than ``dead_band`` (relative).

    A cap lives in Envoy's cluster, not its endpoints, so each change costs a cluster update.
    """
    if previous is None or previous < 1:
        return target
    if abs(math.log(target / previous)) <= math.log1p(dead_band):
        return previous
    return target


def _to_int(*, value: float, low: int, high: int) -> int:
    return min(high, max(low, round(value)))
