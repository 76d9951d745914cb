"""Building the prefix workloads and balancers of a scenario (called from ``running``).

Utilisation of a prefix workload is measured like any other's (``docs/simulator.md``): against
the fleet's capacity with every prompt token prefilled. Cache hits make the same arrivals
lighter, so a prefix-caching fleet at "utilisation 1.0" may still keep up.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from trimtab.policy import PolicySettings
from trimtab_lab.sim.balancers import SharedQueue
from trimtab_lab.sim.engine import Balancer
from trimtab_lab.sim.prefix_balancers import (
    HashRing,
    PrefixScorer,
    RequestKeys,
    RingCluster,
    RingHashBalancer,
    TrimtabRingBalancer,
)
from trimtab_lab.sim.scenario import PolicyName, Scenario, WorkloadSpec
from trimtab_lab.sim.trimtab_balancer import Observation
from trimtab_lab.sim.workloads import ReplicaSpec, Workload, max_request_rate
from trimtab_lab.sim.workloads.base import IntArray
from trimtab_lab.sim.workloads.prefixed import (
    conversation_sizes,
    generate_conversations,
    generate_shared_prefix,
    shared_prefix_sizes,
)

__all__ = ["PREFIX_POLICIES", "build_prefix_workload", "prefix_balancer"]

PREFIX_POLICIES = frozenset(
    {
        PolicyName.PREFIX_SCORER,
        PolicyName.RING_HASH,
        PolicyName.TRIMTAB_RING,
        PolicyName.IDEAL_PREFIX,
    }
)
"""The balancers built here."""

# Sessions (or requests) drawn to estimate a workload's mean request size before generating it.
_SIZING_SESSIONS = 4_000
_SIZING_REQUESTS = 20_000


def build_prefix_workload(
    *,
    spec: WorkloadSpec,
    replicas: Sequence[ReplicaSpec],
    duration_s: float,
    seed: int,
    rate_multiplier: float,
) -> Workload:
    """The conversations or shared-prefix requests of ``spec`` over ``duration_s``."""
    cv = spec.arrivals.cv
    if spec.conversations is not None:
        conversations = spec.conversations.build()
        prompts, outputs, turns = conversation_sizes(
            spec=conversations, sessions=_SIZING_SESSIONS, seed=seed + 1
        )
        rate = _rate(spec=spec, replicas=replicas, prompts=prompts, outputs=outputs)
        return generate_conversations(
            spec=conversations,
            sessions_per_s=rate * rate_multiplier / turns,
            duration_s=duration_s,
            cv=cv,
            seed=seed,
        )
    assert spec.shared_prefix is not None
    shared = spec.shared_prefix.build()
    prompts, outputs = shared_prefix_sizes(spec=shared, count=_SIZING_REQUESTS, seed=seed + 1)
    rate = _rate(spec=spec, replicas=replicas, prompts=prompts, outputs=outputs)
    return generate_shared_prefix(
        spec=shared, rate_per_s=rate * rate_multiplier, duration_s=duration_s, cv=cv, seed=seed
    )


def _rate(
    *, spec: WorkloadSpec, replicas: Sequence[ReplicaSpec], prompts: IntArray, outputs: IntArray
) -> float:
    if spec.rate is not None:
        return spec.rate
    assert spec.utilization is not None
    return spec.utilization * max_request_rate(
        replicas=replicas, prompt_tokens=prompts, output_tokens=outputs
    )


def prefix_balancer(
    *,
    policy: PolicyName,
    scenario: Scenario,
    hosts: int,
    rng: random.Random,
    settings: PolicySettings,
    observation: Observation,
) -> Balancer:
    """One of :data:`PREFIX_POLICIES`, configured by the scenario's ``affinity``."""
    affinity = scenario.affinity
    if policy is PolicyName.PREFIX_SCORER:
        return PrefixScorer(spec=affinity.scorer, rng=rng)
    if policy is PolicyName.IDEAL_PREFIX:
        return SharedQueue(prefix_aware=True)
    if policy is PolicyName.TRIMTAB_RING:
        return TrimtabRingBalancer(
            hosts=hosts, affinity=affinity, settings=settings, observation=observation
        )
    if policy is PolicyName.RING_HASH:
        ring = HashRing(
            hosts=hosts,
            minimum_ring_size=affinity.ring_size,
            hash_balance_factor=affinity.hash_balance_factor,
        )
        return RingHashBalancer(
            cluster=RingCluster(ring=ring),
            keys=RequestKeys(hash_key=affinity.hash_key, key_blocks=affinity.key_blocks),
        )
    raise ValueError(f"{policy.value} is not a prefix balancer")
