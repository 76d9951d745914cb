"""trimtab in the simulator: the real policy, fed through a modelled observation pipeline.

Engine metrics are scraped every ``scrape_interval_s``; the controller decides every
``decide_interval_s`` from the latest scrape (whose age it passes on) and preemption and
generated-token rates over ``rate_window_s``; the decision reaches Envoy ``delay_s`` later, as
weights and per-host caps of an :class:`~trimtab_lab.sim.envoy.EnvoyCluster` running weighted
LEAST_REQUEST with the policy's ``active_request_bias``, ``choice_count`` and
``max_pending_requests``. :class:`PolicyLoop` is that pipeline without Envoy, shared with the
picker balancer (:mod:`trimtab_lab.sim.picker_balancer`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from trimtab.api.records import Decision, PodInput, PodName, PodSample
from trimtab.policy import PolicySettings, compute_decision
from trimtab_lab.replica import ReplicaState
from trimtab_lab.sim.balancers import EnvoyBalancer
from trimtab_lab.sim.engine import Fleet
from trimtab_lab.sim.envoy import EnvoyCluster, LbAlgorithm

__all__ = ["Apply", "Decided", "Observation", "PolicyLoop", "TrimtabBalancer"]

# Replicas have been Ready this long when the run starts, so slow start is over.
_READY_BEFORE_S = 3600.0


@dataclass(frozen=True, kw_only=True)
class Observation:
    """How metrics reach the policy and decisions reach Envoy."""

    scrape_interval_s: float = 2.0
    """Seconds between engine metric samples (Prometheus scrape or direct poll)."""
    decide_interval_s: float = 2.0
    """Seconds between policy decisions (the InferencePool's ``metrics.interval``)."""
    delay_s: float = 0.25
    """Seconds from a decision to Envoy applying it (query, compute, xDS push)."""
    rate_window_s: float = 10.0
    """Window of the preemption and decode-token rates, like
    ``rate(vllm:num_preemptions_total[10s])``."""

    def __post_init__(self) -> None:
        if min(self.scrape_interval_s, self.decide_interval_s, self.rate_window_s) <= 0:
            raise ValueError("scrape, decide and rate window intervals must be > 0")
        if self.delay_s < 0:
            raise ValueError("delay must be >= 0")


@dataclass(frozen=True, kw_only=True)
class Decided:
    """A decision with what it was decided from."""

    decision: Decision
    samples: Mapping[PodName, PodSample]
    """The pods' samples as the policy saw them (ages relative to ``at_s``)."""
    at_s: float
    """When the policy decided."""


Apply = Callable[[Decided, float], None]
"""Called with a decision and the time it lands."""


class PolicyLoop:
    """Scrapes, decisions by :func:`trimtab.policy.compute_decision`, their delayed arrival.

    Every ``decide_interval_s`` the policy decides from the latest scrape of every host (its age
    passed on) and rates over ``rate_window_s``; ``delay_s`` later ``apply`` receives the
    decision with those scrapes.
    """

    def __init__(
        self, *, hosts: int, settings: PolicySettings, observation: Observation, apply: Apply
    ) -> None:
        self._settings = settings
        self._observation = observation
        self._apply = apply
        self._names = [PodName(f"r{h}") for h in range(hosts)]
        keep = int(observation.rate_window_s / observation.scrape_interval_s) + 2
        self._scrapes: list[deque[ReplicaState]] = [deque(maxlen=keep) for _ in range(hosts)]
        self._scraped_s = 0.0
        self._kv_tokens: list[int] = []
        self._previous: Decision | None = None
        self._previous_s = 0.0
        self._fleet: Fleet | None = None

    @property
    def names(self) -> list[PodName]:
        """The pod name of each host, by index."""
        return list(self._names)

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet
        # What vLLM's cache_config_info tells: num_gpu_blocks * block_size.
        self._kv_tokens = [replica.profile.kv_capacity_tokens for replica in fleet.replicas]
        obs = self._observation
        # The operator was running before the window opens: start from its idle decision.
        self._scrape(0.0)
        self._apply(self._decide_now(0.0), 0.0)
        fleet.every(period_s=obs.scrape_interval_s, action=self._scrape, first_s=0.0)
        fleet.every(period_s=obs.decide_interval_s, action=self._decide, first_s=0.0)

    def _scrape(self, now: float) -> None:
        fleet = self._fleet
        assert fleet is not None
        for host, history in enumerate(self._scrapes):
            history.append(fleet.observe(host=host, now=now))
        self._scraped_s = now

    def _decide(self, now: float) -> None:
        fleet = self._fleet
        assert fleet is not None
        decided = self._decide_now(now)
        fleet.at(time_s=now + self._observation.delay_s, action=lambda at: self._apply(decided, at))

    def _decide_now(self, now: float) -> Decided:
        samples = {
            name: sample
            for name, history, kv_tokens in zip(
                self._names, self._scrapes, self._kv_tokens, strict=True
            )
            if (sample := self._sample(history=history, kv_tokens=kv_tokens, now=now)) is not None
        }
        pods = [
            PodInput(name=name, ready_for_s=_READY_BEFORE_S + now, sample=samples.get(name))
            for name in self._names
        ]
        elapsed = now - self._previous_s if self._previous is not None else 0.0
        decision = compute_decision(
            pods=pods, previous=self._previous, settings=self._settings, elapsed_s=elapsed
        )
        self._previous, self._previous_s = decision, now
        return Decided(decision=decision, samples=samples, at_s=now)

    def _sample(
        self, *, history: deque[ReplicaState], kv_tokens: int, now: float
    ) -> PodSample | None:
        if not history:
            return None
        latest = history[-1]
        window_start = latest.time_s - self._observation.rate_window_s
        oldest = next((s for s in history if s.time_s >= window_start - 1e-9), latest)
        span = latest.time_s - oldest.time_s
        rate = (latest.preemptions_total - oldest.preemptions_total) / span if span > 0 else 0.0
        # Like rate(vllm:generation_tokens_total[window]): no rate before two scrapes.
        generated = latest.generated_tokens_total - oldest.generated_tokens_total
        decode = generated / span if span > 0 else None
        return PodSample(
            running=float(latest.running),
            waiting=float(latest.waiting),
            kv_usage=latest.kv_usage,
            preemption_rate=rate,
            age_s=max(0.0, now - self._scraped_s),
            decode_tokens_per_s=decode,
            kv_capacity_tokens=kv_tokens,
        )


class TrimtabBalancer(EnvoyBalancer):
    """Envoy driven by :func:`trimtab.policy.compute_decision` on stale metrics."""

    def __init__(
        self,
        *,
        hosts: int,
        settings: PolicySettings,
        observation: Observation,
        rng: random.Random,
    ) -> None:
        cluster = EnvoyCluster(
            hosts=hosts,
            algorithm=LbAlgorithm.LEAST_REQUEST,
            rng=rng,
            active_request_bias=settings.active_request_bias,
            choice_count=settings.choice_count,
            max_pending_requests=settings.max_pending_requests,
        )
        super().__init__(cluster=cluster)
        self._loop = PolicyLoop(
            hosts=hosts, settings=settings, observation=observation, apply=self._apply
        )
        self._names = self._loop.names

    def start(self, *, fleet: Fleet) -> None:
        super().start(fleet=fleet)
        self._loop.start(fleet=fleet)

    def _apply(self, decided: Decided, now: float) -> None:
        by_name = decided.decision.by_name()
        weights = [by_name[name].weight for name in self._names]
        caps: list[int | None] = [by_name[name].max_in_flight for name in self._names]
        fleet = self._fleet()
        for request, host in self.cluster.configure(weights=weights, caps=caps):
            fleet.send(request=request, host=host, now=now)
