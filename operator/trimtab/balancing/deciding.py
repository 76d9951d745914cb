"""One pool's decisions: the policy call, the decision it continues from, and its telemetry.

:class:`Decider` keeps the last non-empty decision (seeded from the status a previous run wrote,
so a restart continues from its weights instead of jumping to equal) and the time since it,
which drives the policy's smoothing and slow start.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence

from trimtab import policy
from trimtab.api.records import Decision, PodDecision, PodInput, PodName, PodSample, PodState
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.membership import Member, ready_for_s
from trimtab.balancing.telemetry import PoolTelemetry

__all__ = ["Decider", "decision_from_status"]


class Decider:
    """Turns members and samples into a :class:`Decision` and feeds the pool's telemetry."""

    def __init__(
        self,
        *,
        telemetry: PoolTelemetry,
        seed: InferencePoolStatus | None,
        clock: Callable[[], float],
        wall: Callable[[], datetime.datetime],
    ) -> None:
        self._telemetry = telemetry
        self._clock = clock
        self._wall = wall
        self._previous = decision_from_status(seed)
        self._decided_at = clock()

    def decide(
        self,
        *,
        members: Sequence[Member],
        samples: Mapping[PodName, PodSample],
        settings: policy.PolicySettings,
        metrics_ok: bool,
    ) -> Decision:
        now_wall = self._wall()
        inputs = [
            PodInput(
                name=m.endpoint.name,
                ready_for_s=ready_for_s(member=m, now=now_wall),
                sample=samples.get(m.endpoint.name),
            )
            for m in members
        ]
        started = time.perf_counter()
        now = self._clock()
        decision = policy.compute_decision(
            pods=inputs,
            previous=self._previous,
            settings=settings,
            elapsed_s=now - self._decided_at,
        )
        self._telemetry.observe_decision(
            decision=decision,
            samples=samples,
            ready_pods=len(members),
            metrics_available=metrics_ok,
            duration_s=time.perf_counter() - started,
        )
        self._decided_at = now
        if decision.pods:
            self._previous = decision
        return decision


def decision_from_status(status: InferencePoolStatus | None) -> Decision | None:
    """The last decision a previous run wrote, so a restart continues from its weights."""
    if status is None or not status.pods:
        return None
    states = {str(s): s for s in PodState}
    pods = tuple(
        PodDecision(
            name=PodName(pod.name),
            weight=max(1, pod.weight),
            max_in_flight=max(1, pod.max_in_flight),
            state=states.get(pod.state, PodState.SERVING),
            reason=pod.reason,
        )
        for pod in status.pods
    )
    return Decision(pods=pods)
