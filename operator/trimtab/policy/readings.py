"""Turn one pod's raw, untrusted sample into clean numbers and a headroom score.

Metrics arrive from Prometheus or a pod's ``/metrics`` and may be missing, NaN, infinite,
negative or old. This module is the only place that looks at raw values: everything downstream
works with a :class:`Reading` whose fields are finite and in range, or ``None``. The score is
per pod (no fleet-wide state), which is what keeps the policy monotonic in a pod's headroom.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trimtab.api.records import PodSample
from trimtab.policy.settings import PolicySettings

__all__ = ["Reading", "read_sample", "score_headroom", "speed_factor"]

# Score of a pod at or past the KV watermark: small but non-zero so that the queue still ranks
# saturated pods against each other instead of all tying at zero.
_SATURATED_SCORE = 0.01

# A per-sequence decode rate means little on a nearly idle pod (a single sequence decodes fast
# on any GPU), so only pods running at least this many requests are compared.
_MIN_RUNNING_FOR_SPEED = 4.0
# Rates within this share of the pool's best read as "as fast as the best": scrape noise between
# equal pods must not make weights differ (which would take Envoy off power-of-two-choices).
_SPEED_TOLERANCE = 0.8


@dataclass(frozen=True, kw_only=True)
class Reading:
    """A sample after cleaning: finite, non-negative values, or ``None`` when unusable."""

    running: float | None
    waiting: float | None
    kv_usage: float | None
    """0..1; ``None`` when the engine reported a value outside that range (see ``problem``)."""
    preemption_rate: float | None
    age_s: float | None
    """``None`` when the source did not say; never negative."""
    fresh: bool
    """At least one load series is usable and the sample is not older than ``stale_after_s``."""
    per_sequence_rate: float | None = None
    """Decode tokens/s per running request; ``None`` when unknown or too few requests run."""
    unreachable: bool = False
    """The pod did not answer its metrics scrape at all."""
    problem: str | None = None
    """Why the sample is unusable although it arrived (e.g. KV usage given in percent)."""


def read_sample(*, sample: PodSample | None, settings: PolicySettings) -> Reading:
    """Clean one sample; a missing sample reads as not fresh with every value ``None``."""
    if sample is None:
        return Reading(
            running=None, waiting=None, kv_usage=None, preemption_rate=None, age_s=None, fresh=False
        )
    running = _clean(sample.running)
    waiting = _clean(sample.waiting)
    kv_usage = _clean(sample.kv_usage)
    problem = sample.problem
    if kv_usage is not None and kv_usage > 1.0:
        # A percent (85) read as a fraction would starve the pod: refuse it, loudly.
        problem = f"invalid metrics: KV usage {kv_usage:g} outside 0..1"
        kv_usage = None
    age_s, age_known_bad = _clean_age(sample.age_s)
    decode = _clean(sample.decode_tokens_per_s)
    per_sequence_rate = None
    if decode is not None and running is not None and running >= _MIN_RUNNING_FOR_SPEED:
        per_sequence_rate = decode / running
    has_load = running is not None or waiting is not None or kv_usage is not None
    too_old = age_known_bad or (age_s is not None and age_s > settings.stale_after_s)
    return Reading(
        running=running,
        waiting=waiting,
        kv_usage=kv_usage,
        preemption_rate=_clean(sample.preemption_rate),
        age_s=age_s,
        fresh=has_load and not too_old and problem is None,
        per_sequence_rate=per_sequence_rate,
        unreachable=sample.unreachable,
        problem=problem,
    )


def score_headroom(*, reading: Reading, settings: PolicySettings) -> float:
    """How much more load a pod can take, in (0, 1]: KV headroom divided by its queue.

    KV usage is the cost-aware signal (a 10,000-token request holds far more than a 5-token
    one); requests already waiting inside the engine mean it cannot admit more right now.
    """
    kv = reading.kv_usage or 0.0
    low, high = settings.kv_low_watermark, settings.kv_high_watermark
    # Below the low watermark every pod is equally fine: equal weights keep Envoy on P2C.
    kv_headroom = min(1.0, max(_SATURATED_SCORE, (high - kv) / (high - low)))
    waiting = reading.waiting or 0.0
    return kv_headroom / (1.0 + settings.queue_weight * waiting)


def speed_factor(*, reading: Reading, best_rate: float, settings: PolicySettings) -> float:
    """Weight multiplier in ``[weight_floor, 1]`` for a pod decoding slower than the pool's best.

    ``best_rate`` is the highest per-sequence rate among the pool's fresh pods. Unknown rates,
    ``speed_weight`` 0 and rates within the tolerance of the best give 1. Monotonic: a slower
    pod never gets a larger factor.
    """
    rate = reading.per_sequence_rate
    if settings.speed_weight <= 0.0 or rate is None or not best_rate > 0.0:
        return 1.0
    relative = min(1.0, rate / (_SPEED_TOLERANCE * best_rate))
    return max(settings.weight_floor, math.pow(relative, settings.speed_weight))


def _clean(value: float | None) -> float | None:
    # Non-numbers and non-finite values are treated as a missing series; negative values come
    # from counter resets in rate() and mean "nothing", so they read as zero.
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None
    return max(0.0, float(value))


def _clean_age(value: float | None) -> tuple[float | None, bool]:
    """Return (age, known_bad). NaN or infinite ages cannot be trusted and count as stale."""
    if value is None:
        return None, False
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None, True
    # A negative age is clock skew between scraper and controller: the sample is fresh.
    return max(0.0, float(value)), False
