"""``trimtab_picker`` in the simulator: the real admission code behind trimtab's policy loop.

The operator's pipeline is the one ``trimtab`` runs (:class:`PolicyLoop`: scrapes every
``scrape_interval_s``, decisions every ``decide_interval_s``, each landing ``delay_s`` later).
Each decision reaches :class:`trimtab.admission.Admission` through
:func:`trimtab.admission.pod_capacities`, the operator's own feed: the policy's cap,
``accepting`` off while the policy drains the pod, the KV usage of the scrape the decision was
made from (stamped with the scrape's time, so admission sees its age) and the KV size from the
replica's profile (what ``vllm:cache_config_info`` publishes).
Admission counts in-flight requests itself, exactly: a slot is taken at the grant and released
when the request ends, with its output length, which a picker learns only then (from the
response's usage). Speeds stay at 1: no metric tells a real picker a replica's speed.

Refusals (429 for a full queue, a queue timeout or a request too large for any pod; 503 when no
pod is ready) are counted as ``rejected``.

``trimtab_picker_affinity`` is the same with prefix affinity on
(:mod:`trimtab.admission.affinity`): each ask carries the request's block hashes (at the
engines' hash-block size, as the real picker hashes the body) and its session, and the guard's
``affinity_load_factor`` comes from ``trimtab.admission`` like every other admission knob.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    AffinityMode,
    Ask,
    Grant,
    Queued,
    Refusal,
    RequestId,
    pod_capacities,
)
from trimtab.policy import PolicySettings
from trimtab_lab.sim.engine import Fleet
from trimtab_lab.sim.trimtab_balancer import Decided, Observation, PolicyLoop

__all__ = ["PickerBalancer"]


class PickerBalancer:
    """One shared queue with exact per-pod caps, fed by the policy on delayed metrics."""

    def __init__(
        self,
        *,
        hosts: int,
        settings: PolicySettings,
        admission: AdmissionSettings,
        observation: Observation,
        affinity: bool = False,
    ) -> None:
        if affinity:
            admission = dataclasses.replace(admission, affinity=AffinityMode.PREFIX)
        self.admission = Admission(settings=admission)
        self._loop = PolicyLoop(
            hosts=hosts, settings=settings, observation=observation, apply=self._apply
        )
        self._names = self._loop.names
        self._host = {name: host for host, name in enumerate(self._names)}
        self._addresses = {name: str(name) for name in self._names}
        self._fleet: Fleet | None = None
        self._expiry_s = math.inf

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet
        settings = self.admission.settings
        block = fleet.replicas[0].prefix_block_tokens if fleet.replicas else None
        if settings.affinity is AffinityMode.PREFIX and block is not None:
            # The workload's hashes are per engine hash block: the index must count in those.
            self.admission.configure(
                settings=dataclasses.replace(settings, affinity_block_tokens=block), now=0.0
            )
        self._loop.start(fleet=fleet)

    def on_arrival(self, *, request: int, now: float) -> None:
        fleet = self._ready()
        affine = self.admission.settings.affinity is AffinityMode.PREFIX
        session = fleet.sessions[request]
        ask = Ask(
            id=RequestId(str(request)),
            prompt_tokens=fleet.prompt_tokens[request],
            prefix=tuple(fleet.block_hashes[request]) if affine else (),
            session=str(session) if affine and session >= 0 else None,
        )
        self._handle([self.admission.ask(ask=ask, now=now)], now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        output = self._ready().output_tokens[request]
        grants = self.admission.release(id=RequestId(str(request)), now=now, output_tokens=output)
        self._handle(grants, now)

    def _apply(self, decided: Decided, now: float) -> None:
        pods = pod_capacities(
            decision=decided.decision,
            samples=decided.samples,
            addresses=self._addresses,
            now=decided.at_s,
        )
        self._handle(self.admission.set_pods(pods=pods, now=now), now)

    def _expire(self, now: float) -> None:
        self._expiry_s = math.inf
        refused: list[Grant | Refusal] = list(self.admission.expire(now=now))
        # A shed head may unblock the queue behind it.
        refused += self.admission.dispatch(now=now)
        self._handle(refused, now)

    def _handle(self, outcomes: Sequence[Grant | Queued | Refusal], now: float) -> None:
        fleet = self._ready()
        for outcome in outcomes:
            if isinstance(outcome, Grant):
                fleet.send(request=int(outcome.id), host=self._host[outcome.pod], now=now)
            elif isinstance(outcome, Refusal):
                fleet.reject(request=int(outcome.id), now=now)
        deadline = self.admission.next_deadline()
        # One pending timer, at the earliest deadline; a later one is armed when it fires.
        if deadline is not None and deadline < self._expiry_s:
            self._expiry_s = deadline
            fleet.at(time_s=max(deadline, now), action=self._expire)

    def _ready(self) -> Fleet:
        if self._fleet is None:
            raise RuntimeError("balancer used before start()")
        return self._fleet
