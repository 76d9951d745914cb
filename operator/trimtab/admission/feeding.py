"""What admission is told about a pool: pods from the policy's decision and the latest samples.

One function for the operator and the simulator, so the picker the simulator measures is fed
the way the operator feeds the real one: caps from the decision, a pod that drains or whose
metrics port is unreachable takes no new work, KV from the sample with its real age, and the
KV size from the engine's own report (or the spec's override).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trimtab.admission.records import PodCapacity
from trimtab.admission.settings import AdmissionSettings, AffinityMode
from trimtab.api.records import Decision, PodName, PodSample, PodState
from trimtab.api.spec import AdmissionSpec, PrefixAffinityMode

__all__ = ["pod_capacities", "settings_from_spec"]

_NOT_ACCEPTING = frozenset({PodState.DRAINING, PodState.UNREACHABLE})


def settings_from_spec(*, admission: AdmissionSpec, stale_after_s: float) -> AdmissionSettings:
    """``spec.admission`` (and the pool's ``metrics.staleAfter``) as admission settings."""
    return AdmissionSettings(
        queue_length=admission.queue_length,
        queue_ttl_s=float(admission.queue_ttl),
        kv_limit=admission.kv_limit,
        expected_output_tokens=admission.expected_output_tokens,
        bytes_per_token=admission.bytes_per_token,
        stale_after_s=stale_after_s,
        priority_classes=admission.priority_classes,
        retry_after_s=float(admission.retry_after),
        affinity=AffinityMode.PREFIX
        if admission.affinity.mode is PrefixAffinityMode.PREFIX
        else AffinityMode.OFF,
        affinity_block_tokens=admission.affinity.block_tokens,
        affinity_max_prefix_bytes=admission.affinity.max_prefix_bytes,
        affinity_load_factor=admission.affinity.load_factor,
    )


def pod_capacities(
    *,
    decision: Decision,
    samples: Mapping[PodName, PodSample],
    addresses: Mapping[PodName, str],
    now: float,
    speeds: Mapping[PodName, float] | None = None,
    kv_capacity_tokens: int | None = None,
) -> Sequence[PodCapacity]:
    """One :class:`PodCapacity` per decided pod that has an address.

    ``now`` is the clock of the samples' ``age_s`` (the decision's time); ``kv_capacity_tokens``
    overrides what the engines report (for engines that do not).
    """
    found = []
    for pod in decision.pods:
        address = addresses.get(pod.name)
        if address is None:
            continue
        sample = samples.get(pod.name) or PodSample()
        observed_at = None if sample.age_s is None else now - sample.age_s
        kv = sample.kv_usage if observed_at is not None else None
        found.append(
            PodCapacity(
                name=pod.name,
                address=address,
                cap=pod.max_in_flight,
                accepting=pod.state not in _NOT_ACCEPTING,
                speed=(speeds or {}).get(pod.name, 1.0),
                kv_usage=kv,
                kv_observed_at=observed_at if kv is not None else None,
                kv_capacity_tokens=kv_capacity_tokens or sample.kv_capacity_tokens,
            )
        )
    return found
