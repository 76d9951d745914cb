"""compute_decision: a pool's pods and their metrics in, Envoy weights and caps out.

Pure and deterministic: no I/O, no clock, no randomness; time enters only as ``elapsed_s`` and
each pod's ``ready_for_s`` / sample age. One pass classifies every pod (Draining, Warming,
Stale, Serving), scores the fresh ones by headroom relative to the best of them, then settles
each weight and cap from the previous decision. Weights are ints in
``[settings.min_weight, settings.weight_scale]``, so no Ready pod ever gets zero.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trimtab.api.records import Decision, PodDecision, PodInput, PodState
from trimtab.policy.readings import Reading, read_sample, score_headroom, speed_factor
from trimtab.policy.settings import PolicySettings
from trimtab.policy.settling import settle_cap, settle_weight, smoothing_factor

__all__ = ["compute_decision"]

# A draining pod leaves the state only once preemptions fall below this share of the threshold,
# so a rate hovering at the threshold does not flip the pod in and out every cycle.
_DRAIN_EXIT_RATIO = 0.5


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """One pod's classification and unsettled targets."""

    pod: PodInput
    reading: Reading
    state: PodState
    target: float
    cap: int
    reason: str


def compute_decision(
    *,
    pods: Sequence[PodInput],
    previous: Decision | None,
    settings: PolicySettings,
    elapsed_s: float,
) -> Decision:
    """Weights, caps, states and reasons for ``pods``, in their order (first of a name wins).

    ``previous`` is the last decision for this pool (``None`` at start) and ``elapsed_s`` the
    seconds since it; a non-finite or negative ``elapsed_s`` holds smoothed weights still.
    """
    unique = _unique(pods)
    if not unique:
        return Decision()
    before = previous.by_name() if previous is not None else {}
    readings = [read_sample(sample=pod.sample, settings=settings) for pod in unique]
    draining = [
        _is_draining(reading=reading, was=before.get(pod.name), settings=settings)
        for pod, reading in zip(unique, readings, strict=True)
    ]
    scores = [
        score_headroom(reading=reading, settings=settings) if reading.fresh else 0.0
        for reading in readings
    ]
    best = max(
        (s for s, r, d in zip(scores, readings, draining, strict=True) if r.fresh and not d),
        default=0.0,
    )
    best_rate = max(
        (
            r.per_sequence_rate
            for r, d in zip(readings, draining, strict=True)
            if r.fresh and not d and r.per_sequence_rate is not None
        ),
        default=0.0,
    )
    plans = [
        _plan(
            pod=pod,
            reading=reading,
            draining=drain,
            score=score,
            best=best,
            speed=speed_factor(reading=reading, best_rate=best_rate, settings=settings)
            if reading.fresh
            else 1.0,
            settings=settings,
        )
        for pod, reading, drain, score in zip(unique, readings, draining, scores, strict=True)
    ]
    return Decision(
        pods=tuple(
            _settle(
                plan=plan, was=before.get(plan.pod.name), settings=settings, elapsed_s=elapsed_s
            )
            for plan in plans
        )
    )


def _unique(pods: Sequence[PodInput]) -> list[PodInput]:
    seen: set[str] = set()
    unique = []
    for pod in pods:
        if pod.name not in seen:
            seen.add(pod.name)
            unique.append(pod)
    return unique


def _is_draining(*, reading: Reading, was: PodDecision | None, settings: PolicySettings) -> bool:
    rate = reading.preemption_rate
    if not reading.fresh or rate is None:
        return False
    threshold = settings.drain_preemption_rate
    if was is not None and was.state is PodState.DRAINING:
        threshold *= _DRAIN_EXIT_RATIO
        return rate > threshold
    return rate >= threshold


def _plan(
    *,
    pod: PodInput,
    reading: Reading,
    draining: bool,
    score: float,
    best: float,
    speed: float,
    settings: PolicySettings,
) -> _Plan:
    low, high = settings.min_weight, settings.weight_scale
    cap = _cap(reading=reading, settings=settings)
    if reading.unreachable:
        # Equal weight for a dead pod is what made it swallow traffic: Envoy's least-request
        # prefers the emptiest host, and a dead one is always empty.
        return _Plan(
            pod=pod,
            reading=reading,
            state=PodState.UNREACHABLE,
            target=low,
            cap=cap,
            reason="metrics port unreachable",
        )
    if draining:
        drained_cap = max(1, math.floor(cap * settings.drain_cap_fraction))
        reason = f"preempting {reading.preemption_rate or 0.0:.1f}/s"
        return _Plan(
            pod=pod,
            reading=reading,
            state=PodState.DRAINING,
            target=low,
            cap=drained_cap,
            reason=reason,
        )
    if reading.fresh and best > 0.0:
        # Relative to the best fresh pod: a uniform rise in load changes no weight.
        target = low + (high - low) * min(1.0, score / best)
        state, reason = PodState.SERVING, _load_reason(reading, speed)
    elif reading.fresh:
        target = float(high)
        state, reason = PodState.SERVING, _load_reason(reading, speed)
    else:
        # Unknown load reads as "average": the equal weights the fleet would have without us.
        target = float(high)
        state, reason = PodState.STALE, _stale_reason(reading)
    if state is PodState.SERVING and speed < 1.0:
        # A slow decoder finishes long requests late: fewer of them, whatever its headroom.
        target = max(float(low), target * speed)
    ramp = _ramp(ready_for_s=pod.ready_for_s, settings=settings)
    if ramp < 1.0:
        warmed = f"warming {max(0.0, pod.ready_for_s):.0f}/{settings.slow_start_s:.0f}s"
        reason = warmed if state is PodState.SERVING else f"{warmed}, {reason}"
        return _Plan(
            pod=pod,
            reading=reading,
            state=PodState.WARMING,
            target=max(float(low), target * ramp),
            cap=cap,
            reason=reason,
        )
    return _Plan(pod=pod, reading=reading, state=state, target=target, cap=cap, reason=reason)


def _cap(*, reading: Reading, settings: PolicySettings) -> int:
    ceiling = settings.max_in_flight_per_pod
    running, kv = reading.running, reading.kv_usage
    if not settings.adaptive_caps or not reading.fresh or running is None or kv is None:
        return ceiling
    if running <= 0.0 or kv <= 0.0:
        return ceiling
    # Requests in flight now each hold kv / running of the cache on average; that many more
    # fit until the watermark, plus some slack so a short request is not kept waiting.
    sustainable = running * settings.kv_high_watermark / kv
    # Clamp before ceil: absurd inputs (running 1e308) overflow to inf, which ceil rejects.
    wanted = min(float(ceiling), sustainable * (1.0 + settings.cap_headroom))
    return max(settings.min_in_flight_per_pod, math.ceil(wanted))


def _ramp(*, ready_for_s: float, settings: PolicySettings) -> float:
    # An unknown readiness time (NaN) is treated as long ago: never throttle a pod on garbage.
    if settings.slow_start_s <= 0.0 or math.isnan(ready_for_s):
        return 1.0
    progress = max(0.0, ready_for_s) / settings.slow_start_s
    if progress >= 1.0:
        return 1.0
    return max(settings.slow_start_min_fraction, progress)


def _settle(
    *, plan: _Plan, was: PodDecision | None, settings: PolicySettings, elapsed_s: float
) -> PodDecision:
    if plan.state in (PodState.DRAINING, PodState.UNREACHABLE):
        # Draining reacts at once: waiting a smoothing period means more preemptions.
        alpha, snap = 1.0, True
    elif plan.state is PodState.STALE:
        alpha = smoothing_factor(elapsed_s=elapsed_s, time_constant_s=settings.stale_decay_s)
        snap = True
    elif plan.state is PodState.WARMING:
        alpha, snap = 1.0, False
    else:
        alpha = smoothing_factor(elapsed_s=elapsed_s, time_constant_s=settings.smoothing_s)
        snap = False
    weight = settle_weight(
        previous=was.weight if was is not None else None,
        target=plan.target,
        alpha=alpha,
        dead_band=settings.min_weight_change,
        snap=snap,
        low=settings.min_weight,
        high=settings.weight_scale,
    )
    cap = settle_cap(
        previous=was.max_in_flight if was is not None else None,
        target=plan.cap,
        dead_band=settings.min_weight_change,
    )
    return PodDecision(
        name=plan.pod.name,
        weight=weight,
        max_in_flight=min(cap, settings.max_in_flight_per_pod),
        state=plan.state,
        reason=plan.reason,
    )


def _load_reason(reading: Reading, speed: float = 1.0) -> str:
    parts = []
    if reading.kv_usage is not None:
        parts.append(f"kv {reading.kv_usage:.2f}")
    if reading.waiting is not None:
        parts.append(f"q {reading.waiting:g}")
    if reading.running is not None and reading.kv_usage is None:
        parts.append(f"running {reading.running:g}")
    if speed < 1.0:
        parts.append(f"speed {speed:.2f}")
    return " ".join(parts)


def _stale_reason(reading: Reading) -> str:
    if reading.problem is not None:
        return reading.problem
    if reading.age_s is not None:
        return f"metrics stale {reading.age_s:.0f}s"
    if reading.running is None and reading.waiting is None and reading.kv_usage is None:
        return "no metrics"
    return "metrics stale"
