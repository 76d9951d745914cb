"""What a pool's status should say, and which transitions deserve an event.

The :class:`Reporter` turns each tick's :class:`Observation` into a :class:`Report`: the full
status (conditions follow ``metav1.Condition`` semantics) plus whether it is worth writing,
and the events for transitions only. Status writes are rate-limited: a condition flip or a new
generation is written at once, other material changes (pods joining, states, weight moves of
more than ``weight_change``) at most every ``min_write_interval_s``, and a heartbeat keeps
``lastDecisionTime`` honest. Events pass the per pool and reason :class:`SpamFilter`.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trimtab.api.records import Decision, PodName, PodSample, PodState, PoolKey
from trimtab.api.status import (
    Condition,
    ConditionStatus,
    ConditionType,
    InferencePoolStatus,
    PodStatus,
)
from trimtab.api.times import rfc3339
from trimtab.balancing.conditions import find_condition, set_condition
from trimtab.balancing.membership import Member
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.targets.base import TargetState

NO_SERIES_REASON = "NoSeries"
"""MetricsAvailable=False reason: the source answered but had no series for any pod."""

__all__ = [
    "NO_SERIES_REASON",
    "EventType",
    "Observation",
    "PoolEvent",
    "Report",
    "ReportSettings",
    "Reporter",
]

EventType = str  # "Normal" or "Warning", as in core/v1 Event.type


@dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything one tick of a pool's loop saw and decided."""

    generation: int | None
    spec_problems: tuple[str, ...] = ()
    """Non-empty when the spec is invalid; the rest is then ignored."""
    members: Sequence[Member] = ()
    decision: Decision | None = None
    samples: Mapping[PodName, PodSample] = field(default_factory=dict)
    metrics_error: str | None = None
    """Why the metrics source could not be read this tick; ``None`` when it was."""
    targets: Sequence[tuple[str, TargetState]] = ()


@dataclass(frozen=True, kw_only=True)
class PoolEvent:
    type: EventType
    reason: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Report:
    status: InferencePoolStatus
    write: bool
    """Whether the status changed materially and is due (rate limit) for a write."""
    events: tuple[PoolEvent, ...]


@dataclass(frozen=True, kw_only=True)
class ReportSettings:
    min_write_interval_s: float = 5.0
    """Least seconds between two status writes for weight moves alone."""
    heartbeat_s: float = 60.0
    """Most seconds between two status writes, to refresh ``lastDecisionTime``."""
    weight_change: float = 0.1
    """Relative weight change that counts as material for the status."""
    rebalance_change: float = 0.25
    """Relative weight change since the last Rebalanced event that announces a new one."""


class Reporter:
    """Keeps one pool's conditions and last written/announced state across ticks."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        spam: SpamFilter,
        settings: ReportSettings,
        clock: Callable[[], float],
        wall: Callable[[], datetime.datetime],
        seed: InferencePoolStatus | None = None,
    ) -> None:
        self._pool = pool
        self._spam = spam
        self._settings = settings
        self._clock = clock
        self._wall = wall
        self._status = seed or InferencePoolStatus()
        self._written: InferencePoolStatus | None = None
        self._written_at = -math.inf
        self._announced: dict[PodName, int] = {}
        self._previous: Decision | None = None

    def observe(self, observation: Observation) -> Report:
        now = self._wall()
        events: list[PoolEvent] = []
        conditions, flipped = self._conditions(observation=observation, now=now, events=events)
        status = self._status.model_copy(
            update={"observed_generation": observation.generation, "conditions": conditions}
        )
        if not observation.spec_problems and observation.decision is not None:
            status = _with_decision(status=status, observation=observation, now=now)
            self._pod_events(decision=observation.decision, samples=observation, events=events)
        self._status = status
        due = self._clock() - self._written_at
        write = self._written is None or flipped
        write = write or status.observed_generation != self._written_status().observed_generation
        write = write or (due >= self._settings.min_write_interval_s and self._material(status))
        write = write or due >= self._settings.heartbeat_s
        allowed = tuple(e for e in events if self._spam.allow(pool=self._pool, reason=e.reason))
        return Report(status=status, write=write, events=allowed)

    def confirm_written(self, status: InferencePoolStatus) -> None:
        """Record a successful status write (a failed or skipped one is retried next tick)."""
        self._written = status
        self._written_at = self._clock()

    def _written_status(self) -> InferencePoolStatus:
        return self._written or InferencePoolStatus()

    def _conditions(
        self, *, observation: Observation, now: datetime.datetime, events: list[PoolEvent]
    ) -> tuple[list[Condition], bool]:
        generation = observation.generation
        before = {c.type: c for c in self._status.conditions}
        conditions = list(self._status.conditions)
        flipped = False

        def put(kind: ConditionType, ok: bool, reason: str, message: str) -> None:
            nonlocal conditions, flipped
            status = ConditionStatus.TRUE if ok else ConditionStatus.FALSE
            conditions, changed = set_condition(
                conditions=conditions,
                kind=kind,
                status=status,
                reason=reason,
                message=message,
                observed_generation=generation,
                now=now,
            )
            flipped = flipped or changed

        if observation.spec_problems:
            message = "; ".join(observation.spec_problems)
            put(ConditionType.READY, False, "SpecInvalid", message)
            old = before.get(str(ConditionType.READY))
            if old is None or old.reason != "SpecInvalid" or old.message != message:
                events.append(PoolEvent(type="Warning", reason="SpecInvalid", message=message))
            return conditions, flipped

        if not observation.members:
            put(ConditionType.READY, False, "NoReadyPods", "no Ready pod matches the selector")
        else:
            put(ConditionType.READY, True, "Balancing", f"{len(observation.members)} pods")
        metrics_ok = observation.metrics_error is None
        put(
            ConditionType.METRICS_AVAILABLE,
            metrics_ok,
            "MetricsRead" if metrics_ok else _metrics_reason(observation.metrics_error),
            "" if metrics_ok else observation.metrics_error or "",
        )
        # "Pending" is a driver that has not finished its first apply: not a failure yet.
        failing = [
            (name, state)
            for name, state in observation.targets
            if not state.synced and state.reason != "Pending"
        ]
        put(
            ConditionType.TARGETS_SYNCED,
            not failing,
            failing[0][1].reason if failing else "Synced",
            "; ".join(f"{name}: {state.message or state.reason}" for name, state in failing),
        )
        stale = _stale_pods(observation)
        problems = [*(["metrics unavailable"] if not metrics_ok else [])]
        problems += [f"target {name} not synced" for name, _ in failing]
        problems += [f"stale metrics for {', '.join(stale)}"] if stale else []
        put(
            ConditionType.DEGRADED,
            bool(problems),
            "Degraded" if problems else "AsExpected",
            "; ".join(problems),
        )
        self._transition_events(before=before, after=conditions, events=events)
        return conditions, flipped

    def _transition_events(
        self,
        *,
        before: Mapping[str, Condition],
        after: Sequence[Condition],
        events: list[PoolEvent],
    ) -> None:
        def flipped_to(kind: ConditionType, status: ConditionStatus) -> Condition | None:
            now = find_condition(after, kind)
            old = before.get(str(kind))
            changed = old is None or old.status != status or old.reason != (now and now.reason)
            return now if now is not None and now.status == status and changed else None

        ready = flipped_to(ConditionType.READY, ConditionStatus.FALSE)
        if ready is not None and ready.reason == "NoReadyPods":
            events.append(PoolEvent(type="Warning", reason="NoReadyPods", message=ready.message))
        stale = flipped_to(ConditionType.METRICS_AVAILABLE, ConditionStatus.FALSE)
        if stale is not None:
            message = f"{stale.message}; weights decay to equal after staleAfter"
            events.append(PoolEvent(type="Warning", reason="MetricsStale", message=message))
        recovered = flipped_to(ConditionType.METRICS_AVAILABLE, ConditionStatus.TRUE)
        if recovered is not None and str(ConditionType.METRICS_AVAILABLE) in before:
            events.append(PoolEvent(type="Normal", reason="MetricsRecovered", message="read again"))
        failed = flipped_to(ConditionType.TARGETS_SYNCED, ConditionStatus.FALSE)
        if failed is not None:
            events.append(
                PoolEvent(type="Warning", reason="TargetSyncFailed", message=failed.message)
            )

    def _pod_events(
        self, *, decision: Decision, samples: Observation, events: list[PoolEvent]
    ) -> None:
        before = self._previous.by_name() if self._previous is not None else {}
        for pod in decision.pods:
            was = before.get(pod.name)
            if pod.state is PodState.WARMING and (was is None or was.state is not PodState.WARMING):
                message = f"{pod.name} warming up: {pod.reason}".rstrip(": ")
                events.append(PoolEvent(type="Normal", reason="PodWarming", message=message))
            if pod.state is PodState.DRAINING and (was is None or was.state is not pod.state):
                message = f"{pod.name} drained: {pod.reason}".rstrip(": ")
                events.append(PoolEvent(type="Normal", reason="PodDrained", message=message))
        self._previous = decision
        moves = _moves(announced=self._announced, decision=decision, samples=samples.samples)
        big = [m for m in moves if m[0] > math.log1p(self._settings.rebalance_change)]
        if not self._announced:
            self._announced = {pod.name: pod.weight for pod in decision.pods}
        elif big:
            text = ", ".join(m[1] for m in big[:3])
            events.append(PoolEvent(type="Normal", reason="Rebalanced", message=text))
            self._announced = {pod.name: pod.weight for pod in decision.pods}

    def _material(self, status: InferencePoolStatus) -> bool:
        written = self._written_status()
        old = {pod.name: pod for pod in written.pods}
        if set(old) != {pod.name for pod in status.pods}:
            return True
        limit = math.log1p(self._settings.weight_change)
        for pod in status.pods:
            was = old[pod.name]
            if (pod.state, pod.max_in_flight) != (was.state, was.max_in_flight):
                return True
            if abs(math.log(max(pod.weight, 1) / max(was.weight, 1))) > limit:
                return True
        return False


def _with_decision(
    *, status: InferencePoolStatus, observation: Observation, now: datetime.datetime
) -> InferencePoolStatus:
    decision = observation.decision
    assert decision is not None
    addresses = {m.endpoint.name: m.endpoint.address for m in observation.members}
    pods = []
    for pod in decision.pods:
        sample = observation.samples.get(pod.name) or PodSample()
        pods.append(
            PodStatus(
                name=pod.name,
                address=addresses.get(pod.name, ""),
                weight=pod.weight,
                max_in_flight=pod.max_in_flight,
                running=sample.running,
                waiting=sample.waiting,
                kv_usage=sample.kv_usage,
                state=str(pod.state),
                reason=pod.reason,
            )
        )
    weights = [pod.weight for pod in decision.pods]
    kvs = [p.kv_usage for p in pods if p.kv_usage is not None and math.isfinite(p.kv_usage)]
    return status.model_copy(
        update={
            "pods": pods,
            "ready_pods": len(observation.members),
            "max_kv_usage": max(kvs, default=None),
            "weight_spread": round(max(weights) / max(1, min(weights)), 3) if weights else None,
            "last_decision_time": rfc3339(now),
        }
    )


def _stale_pods(observation: Observation) -> list[str]:
    if observation.decision is None:
        return []
    return [pod.name for pod in observation.decision.pods if pod.state is PodState.STALE]


def _moves(
    *, announced: Mapping[PodName, int], decision: Decision, samples: Mapping[PodName, PodSample]
) -> list[tuple[float, str]]:
    """Weight moves since the last announcement, biggest first, as ``(size, text)``."""
    moves = []
    for pod in decision.pods:
        old = announced.get(pod.name)
        if old is None or old == pod.weight:
            continue
        kv = samples.get(pod.name, PodSample()).kv_usage
        note = f" (kv {kv:.2f})" if kv is not None and pod.weight < old else ""
        size = abs(math.log(max(pod.weight, 1) / max(old, 1)))
        moves.append((size, f"{pod.name} {old}→{pod.weight}{note}"))
    return sorted(moves, reverse=True)


def _metrics_reason(error: str | None) -> str:
    # The loop prefixes "the source answered, but with nothing" with its reason.
    return (
        NO_SERIES_REASON
        if error and error.startswith(f"{NO_SERIES_REASON}:")
        else "SourceUnavailable"
    )
