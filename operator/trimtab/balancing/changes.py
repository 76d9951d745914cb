"""What changed in a pool since the last tick: its conditions, and the events worth posting.

:class:`ChangeTracker` sets the four conditions from an :class:`Observation` (with
``metav1.Condition`` semantics: ``lastTransitionTime`` moves only on a flip) and produces
three kinds of events, for transitions only: condition flips (``NoReadyPods``,
``MetricsStale``, ``MetricsRecovered``, ``TargetSyncFailed``, and ``SpecInvalid`` whenever the
problems change), pod state changes (``PodWarming``, ``PodDrained``), and weight moves of more
than ``rebalance_change`` since the last announcement (``Rebalanced``).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trimtab.api.reasons import (
    DegradedReason,
    EventReason,
    EventType,
    MetricsReason,
    ReadyReason,
    TargetReason,
)
from trimtab.api.records import Decision, PodName, PodSample, PodState
from trimtab.api.status import Condition, ConditionStatus, ConditionType
from trimtab.balancing.conditions import find_condition, set_condition
from trimtab.balancing.observations import Observation
from trimtab.balancing.statuswrites import admission_status

__all__ = ["ChangeTracker", "Changes", "PoolEvent"]


@dataclass(frozen=True, kw_only=True)
class PoolEvent:
    type: EventType
    reason: EventReason
    message: str


@dataclass(frozen=True, kw_only=True)
class Changes:
    conditions: list[Condition]
    flipped: bool
    """Whether any condition changed (status, reason, message or generation)."""
    events: tuple[PoolEvent, ...]


class ChangeTracker:
    """Keeps one pool's conditions, last decision and last announced weights across ticks."""

    def __init__(self, *, conditions: Sequence[Condition], rebalance_change: float) -> None:
        self._conditions = list(conditions)
        self._rebalance_change = rebalance_change
        self._previous: Decision | None = None
        self._announced: dict[PodName, int] = {}
        self._shed: int | None = None
        self._shedding = False

    def observe(self, observation: Observation, *, now: datetime.datetime) -> Changes:
        events: list[PoolEvent] = []
        before = {c.type: c for c in self._conditions}
        conditions = _Conditions(
            current=self._conditions, generation=observation.generation, now=now
        )
        if observation.spec_problems:
            message = "; ".join(observation.spec_problems)
            conditions.put(ConditionType.READY, False, ReadyReason.SPEC_INVALID, message)
            old = before.get(str(ConditionType.READY))
            if old is None or old.reason != ReadyReason.SPEC_INVALID or old.message != message:
                events.append(_warning(EventReason.SPEC_INVALID, message))
        else:
            _put_conditions(conditions, observation=observation)
            events += _transition_events(before=before, after=conditions.current)
            if observation.decision is not None:
                events += self._pod_events(decision=observation.decision, samples=observation)
            events += self._queue_events(observation)
        self._conditions = conditions.current
        return Changes(
            conditions=conditions.current, flipped=conditions.flipped, events=tuple(events)
        )

    def _queue_events(self, observation: Observation) -> list[PoolEvent]:
        """One Warning when the picker starts shedding, one Normal when a tick sheds none."""
        if observation.admission is None:
            self._shed, self._shedding = None, False
            return []
        status = admission_status(observation.admission)
        new = 0 if self._shed is None else max(0, status.shed - self._shed)
        self._shed = status.shed
        if new and not self._shedding:
            self._shedding = True
            message = (
                f"shed {new} requests with 429 since the last tick; {status.queue_length} queued"
            )
            return [_warning(EventReason.QUEUE_SHEDDING, message)]
        if not new and self._shedding:
            self._shedding = False
            return [_normal(EventReason.QUEUE_RECOVERED, "no request shed since the last tick")]
        return []

    def _pod_events(self, *, decision: Decision, samples: Observation) -> list[PoolEvent]:
        events = []
        before = self._previous.by_name() if self._previous is not None else {}
        for pod in decision.pods:
            was = before.get(pod.name)
            if pod.state is PodState.WARMING and (was is None or was.state is not PodState.WARMING):
                message = f"{pod.name} warming up: {pod.reason}".rstrip(": ")
                events.append(_normal(EventReason.POD_WARMING, message))
            if pod.state is PodState.DRAINING and (was is None or was.state is not pod.state):
                message = f"{pod.name} drained: {pod.reason}".rstrip(": ")
                events.append(_normal(EventReason.POD_DRAINED, message))
        self._previous = decision
        moves = _moves(announced=self._announced, decision=decision, samples=samples.samples)
        big = [m for m in moves if m[0] > math.log1p(self._rebalance_change)]
        if not self._announced:
            self._announced = {pod.name: pod.weight for pod in decision.pods}
        elif big:
            events.append(_normal(EventReason.REBALANCED, ", ".join(m[1] for m in big[:3])))
            self._announced = {pod.name: pod.weight for pod in decision.pods}
        return events


class _Conditions:
    """A condition list being updated for one tick; remembers whether anything changed."""

    def __init__(
        self, *, current: Sequence[Condition], generation: int | None, now: datetime.datetime
    ) -> None:
        self.current = list(current)
        self.flipped = False
        self._generation = generation
        self._now = now

    def put(self, kind: ConditionType, ok: bool, reason: str, message: str) -> None:
        self.current, changed = set_condition(
            conditions=self.current,
            kind=kind,
            status=ConditionStatus.TRUE if ok else ConditionStatus.FALSE,
            reason=reason,
            message=message,
            observed_generation=self._generation,
            now=self._now,
        )
        self.flipped = self.flipped or changed


def _put_conditions(conditions: _Conditions, *, observation: Observation) -> None:
    if not observation.members:
        message = "no Ready pod matches the selector"
        conditions.put(ConditionType.READY, False, ReadyReason.NO_READY_PODS, message)
    else:
        message = f"{len(observation.members)} pods"
        conditions.put(ConditionType.READY, True, ReadyReason.BALANCING, message)
    problem = observation.metrics_problem
    conditions.put(
        ConditionType.METRICS_AVAILABLE,
        problem is None,
        MetricsReason.METRICS_READ if problem is None else problem.kind,
        "" if problem is None else problem.message,
    )
    failing = [
        (name, state)
        for name, state in observation.targets
        if not state.synced and state.reason != TargetReason.PENDING
    ]
    conditions.put(
        ConditionType.TARGETS_SYNCED,
        not failing,
        failing[0][1].reason if failing else TargetReason.SYNCED,
        "; ".join(f"{name}: {state.message or state.reason}" for name, state in failing),
    )
    stale = _stale_pods(observation)
    problems = ["metrics unavailable"] if problem is not None else []
    problems += [f"target {name} not synced" for name, _ in failing]
    problems += [f"stale metrics for {', '.join(stale)}"] if stale else []
    conditions.put(
        ConditionType.DEGRADED,
        bool(problems),
        DegradedReason.DEGRADED if problems else DegradedReason.AS_EXPECTED,
        "; ".join(problems),
    )


def _transition_events(
    *, before: Mapping[str, Condition], after: Sequence[Condition]
) -> list[PoolEvent]:
    def flipped_to(kind: ConditionType, status: ConditionStatus) -> Condition | None:
        now = find_condition(after, kind)
        old = before.get(str(kind))
        changed = old is None or old.status != status or old.reason != (now and now.reason)
        return now if now is not None and now.status == status and changed else None

    events = []
    ready = flipped_to(ConditionType.READY, ConditionStatus.FALSE)
    if ready is not None and ready.reason == ReadyReason.NO_READY_PODS:
        events.append(_warning(EventReason.NO_READY_PODS, ready.message))
    stale = flipped_to(ConditionType.METRICS_AVAILABLE, ConditionStatus.FALSE)
    if stale is not None:
        message = f"{stale.message}; weights decay to equal after staleAfter"
        events.append(_warning(EventReason.METRICS_STALE, message))
    recovered = flipped_to(ConditionType.METRICS_AVAILABLE, ConditionStatus.TRUE)
    if recovered is not None and str(ConditionType.METRICS_AVAILABLE) in before:
        events.append(_normal(EventReason.METRICS_RECOVERED, "read again"))
    failed = flipped_to(ConditionType.TARGETS_SYNCED, ConditionStatus.FALSE)
    # The xDS ready gate holds every pool for a few seconds on a healthy start (at most its
    # deadline): expected, so the condition says so but no Warning is posted.
    if failed is not None and failed.reason != TargetReason.XDS_NOT_READY:
        events.append(_warning(EventReason.TARGET_SYNC_FAILED, failed.message))
    return events


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


def _normal(reason: EventReason, message: str) -> PoolEvent:
    return PoolEvent(type=EventType.NORMAL, reason=reason, message=message)


def _warning(reason: EventReason, message: str) -> PoolEvent:
    return PoolEvent(type=EventType.WARNING, reason=reason, message=message)
