"""How a pool's status is written: the per-pod table, and when a write is due.

:func:`with_decision` fills the table and summary figures from a tick's decision.
:class:`WriteThrottle` rate-limits writes, because a status write every tick floods every
watcher: a condition flip or a new generation is due at once, other material changes (pods
joining or leaving, states, caps, weight moves of more than ``weight_change``) at most every
``min_write_interval_s``, and a heartbeat every ``heartbeat_s`` keeps ``lastDecisionTime``
honest. Only a confirmed write counts; a failed or skipped one is due again next tick.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable

from trimtab.admission import AdmissionStats, RefusalReason
from trimtab.api.records import PodSample
from trimtab.api.status import AdmissionStatus, InferencePoolStatus, PodStatus
from trimtab.api.times import rfc3339
from trimtab.balancing.observations import Observation

__all__ = ["WriteThrottle", "with_decision"]


def with_decision(
    *, status: InferencePoolStatus, observation: Observation, now: datetime.datetime
) -> InferencePoolStatus:
    """``status`` with the pod table and figures of ``observation``'s decision."""
    decision = observation.decision
    if decision is None:
        return status
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
                prefix_hit_rate=sample.prefix_hit_rate,
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
            "admission": None
            if observation.admission is None
            else admission_status(observation.admission),
        }
    )


SHED_REASONS = (RefusalReason.QUEUE_FULL, RefusalReason.QUEUE_TIMEOUT)


def admission_status(stats: AdmissionStats) -> AdmissionStatus:
    return AdmissionStatus(
        queue_length=stats.queue_length,
        in_flight=sum(pod.in_flight for pod in stats.pods),
        granted=stats.granted,
        shed=sum(stats.refused.get(reason, 0) for reason in SHED_REASONS),
    )


class WriteThrottle:
    """Remembers the last confirmed write and decides whether the next status is due."""

    def __init__(
        self,
        *,
        min_write_interval_s: float,
        heartbeat_s: float,
        weight_change: float,
        clock: Callable[[], float],
    ) -> None:
        self._min_interval_s = min_write_interval_s
        self._heartbeat_s = heartbeat_s
        self._weight_change = weight_change
        self._clock = clock
        self._written: InferencePoolStatus | None = None
        self._written_at = -math.inf

    def due(self, *, status: InferencePoolStatus, flipped: bool) -> bool:
        """Whether ``status`` should be written now; ``flipped``: a condition changed."""
        if self._written is None or flipped:
            return True
        if status.observed_generation != self._written.observed_generation:
            return True
        since = self._clock() - self._written_at
        if since >= self._min_interval_s and self._material(status, written=self._written):
            return True
        return since >= self._heartbeat_s

    def confirm(self, status: InferencePoolStatus) -> None:
        """Record a successful write of ``status``."""
        self._written = status
        self._written_at = self._clock()

    def _material(self, status: InferencePoolStatus, *, written: InferencePoolStatus) -> bool:
        old = {pod.name: pod for pod in written.pods}
        if set(old) != {pod.name for pod in status.pods}:
            return True
        limit = math.log1p(self._weight_change)
        for pod in status.pods:
            was = old[pod.name]
            if (pod.state, pod.max_in_flight) != (was.state, was.max_in_flight):
                return True
            if abs(math.log(max(pod.weight, 1) / max(was.weight, 1))) > limit:
                return True
        return False
