"""The policy's knobs: one frozen, validated dataclass.

Every field has a default that the fleet simulator chose (see ``docs/policy.md``), a unit and an
allowed range. ``__post_init__`` rejects anything outside it with a ``ValueError`` that names the
field, so a bad ``spec.policy`` fails loudly at the edge instead of producing odd weights. The
API layer mirrors these fields in camelCase; the last three are handed to Envoy, not used here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["PolicySettings"]

# (low, high, low_inclusive, high_inclusive) per numeric field. Kept next to the dataclass so the
# docstrings and the checks cannot drift far apart.
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "max_in_flight_per_pod": (1, 1_000_000, True, True),
    "min_in_flight_per_pod": (1, 1_000_000, True, True),
    "slow_start_s": (0.0, 3600.0, True, True),
    "slow_start_min_fraction": (0.0, 1.0, False, True),
    "stale_after_s": (0.0, 3600.0, False, True),
    "stale_decay_s": (0.0, 3600.0, True, True),
    "kv_low_watermark": (0.0, 1.0, True, False),
    "kv_high_watermark": (0.0, 1.0, False, True),
    "queue_weight": (0.0, 100.0, True, True),
    "smoothing_s": (0.0, 600.0, True, True),
    "min_weight_change": (0.0, 1.0, True, False),
    "weight_scale": (1, 100_000, True, True),
    "weight_floor": (0.0, 1.0, False, True),
    "cap_headroom": (0.0, 10.0, True, True),
    "speed_weight": (0.0, 10.0, True, True),
    "drain_preemption_rate": (0.0, math.inf, False, True),
    "drain_cap_fraction": (0.0, 1.0, False, True),
    "active_request_bias": (0.0, 10.0, True, True),
    "choice_count": (2, 100, True, True),
    "max_pending_requests": (1, 100_000_000, True, True),
}


@dataclass(frozen=True, kw_only=True)
class PolicySettings:
    """Tuning of :func:`trimtab.policy.compute_decision` and of the Envoy load balancer."""

    max_in_flight_per_pod: int = 1024
    """Static ceiling of every pod's in-flight cap, requests. Range 1..1,000,000. Default 1024:
    above vLLM's usual 256-sequence batch, so the cap only guards against overload (at 64 the
    simulator saw 11 % of the Azure conversation trace rejected)."""

    min_in_flight_per_pod: int = 4
    """Floor of an adaptive cap, requests. Range 1..1,000,000, at most the ceiling. Default 4."""

    slow_start_s: float = 60.0
    """Seconds over which a newly Ready pod's weight ramps up (0 disables). 0..3600. Default 60."""

    slow_start_min_fraction: float = 0.1
    """Share of its weight a pod gets at the start of slow start. (0, 1]. Default 0.1."""

    stale_after_s: float = 15.0
    """Metrics older than this many seconds are stale. (0, 3600]. Default 15."""

    stale_decay_s: float = 10.0
    """Time constant, seconds, of a stale pod's decay to the neutral weight. 0..3600. Default 10."""

    kv_low_watermark: float = 0.7
    """KV-cache usage (fraction) below which a pod has full headroom, so a fleet below it gets
    equal weights. [0, 1), below the high watermark. Default 0.7."""

    kv_high_watermark: float = 0.9
    """KV-cache usage (fraction) at which a pod has no headroom left. (0, 1]. Default 0.9."""

    queue_weight: float = 0.0
    """How much each request waiting inside the engine divides a pod's headroom (1: one waiting
    request halves it). 0..100. Default 0 (off: Envoy's live request counts see queues sooner)."""

    smoothing_s: float = 30.0
    """Time constant, seconds, of the exponential smoothing of weights (0 = none). 0..600.
    Default 30."""

    min_weight_change: float = 0.05
    """Hysteresis: a weight moves only when its target differs by more than this fraction of
    ``weight_scale``. [0, 1). Default 0.05."""

    weight_scale: int = 1000
    """Weight of the pod with the most headroom; all weights are ints in
    ``[max(1, round(weight_scale * weight_floor)), weight_scale]``. 1..100,000. Default 1000."""

    weight_floor: float = 0.02
    """Lowest weight as a fraction of ``weight_scale`` (saturated or draining pods). (0, 1].
    Default 0.02."""

    adaptive_caps: bool = False
    """Derive each pod's cap from the batch its KV cache sustains instead of the static ceiling.
    Default off."""

    cap_headroom: float = 0.25
    """Adaptive caps: extra in-flight allowed above the sustainable batch, as a fraction of it.
    0..10. Default 0.25."""

    speed_weight: float = 0.0
    """Exponent of the decode-speed factor: a pod whose per-sequence decode rate (generated
    tokens/s over running requests) is below the pool's best gets its weight multiplied by
    ``(rate / (0.8 * best)) ** speed_weight`` (at most 1, at least the floor). Applied only
    to pods running at least 4 requests. 0 turns it off. 0..10. Default 0 (off): in the
    simulator 2 lowered p99 TTFT 4-16 % and p99 e2e ~1-3 % on fleets with a slow replica, but
    raised p99 TTFT 6 % on the bursty Azure code trace (docs/policy.md)."""

    drain_preemption_rate: float = 1.0
    """Preemptions per second at which a pod is drained (``inf`` never drains). (0, inf].
    Default 1."""

    drain_cap_fraction: float = 0.5
    """A draining pod's cap as a fraction of its normal cap (never below 1). (0, 1]. Default 0.5."""

    active_request_bias: float = 4.0
    """Envoy LEAST_REQUEST ``active_request_bias``: weight / (active + 1) ** bias; 0 follows the
    weights exactly. Used only while weights differ. 0..10. Default 4."""

    choice_count: int = 2
    """Envoy LEAST_REQUEST ``choice_count`` (power of N choices, equal weights only). 2..100.
    Default 2."""

    max_pending_requests: int = 1024
    """Envoy cluster ``max_pending_requests``: requests waiting for a capped pod, cluster-wide;
    overflow is a 503. 1..100,000,000. Default 1024."""

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if spec.type == "bool":
                if not isinstance(value, bool):
                    raise ValueError(f"{spec.name} must be a bool, got {value!r}")
                continue
            _check_number(name=spec.name, value=value, integral=spec.type == "int")
        if self.kv_low_watermark >= self.kv_high_watermark:
            raise ValueError(
                f"kv_low_watermark ({self.kv_low_watermark}) must be below "
                f"kv_high_watermark ({self.kv_high_watermark})"
            )
        if self.min_in_flight_per_pod > self.max_in_flight_per_pod:
            raise ValueError(
                f"min_in_flight_per_pod ({self.min_in_flight_per_pod}) must not exceed "
                f"max_in_flight_per_pod ({self.max_in_flight_per_pod})"
            )

    @property
    def min_weight(self) -> int:
        """The lowest weight any Ready pod gets (Envoy rejects 0)."""
        return max(1, min(self.weight_scale, round(self.weight_scale * self.weight_floor)))


def _check_number(*, name: str, value: object, integral: bool) -> None:
    # bool is an int subclass; ``True`` as a cap or a weight scale is a spec mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if integral and not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    low, high, low_inclusive, high_inclusive = _RANGES[name]
    above = value >= low if low_inclusive else value > low
    below = value <= high if high_inclusive else value < high
    if math.isnan(value) or not (above and below):
        left = "[" if low_inclusive else "("
        right = "]" if high_inclusive else ")"
        raise ValueError(f"{name} must be in {left}{low}, {high}{right}, got {value!r}")
