"""Feed a pool's decisions to the endpoint picker, when its spec asks for admission.

The picker knows a pool by the Envoy cluster name its routes carry (the bootstrap sets the
``x-trimtab-pool`` metadata to it), so the feed maps each trimtab pool to the cluster of its
first Envoy target. A pool whose admission is off, or that is gone, is removed from the
picker: Envoy then routes its requests by the weights alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from trimtab import admission
from trimtab.admission import AdmissionStats
from trimtab.api.records import Decision, PodName, PodSample, PoolKey
from trimtab.api.spec import AdmissionMode, InferencePoolSpec
from trimtab.balancing.membership import Member
from trimtab.picker.pools import PickerPools
from trimtab.targets.factory import xds_cluster_name

__all__ = ["AdmissionFeed", "PickerFeed", "picker_pool_name"]


class AdmissionFeed(Protocol):
    """Where a pool loop sends each decision for per-request admission."""

    def offer(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        members: Sequence[Member],
        samples: Mapping[PodName, PodSample],
        now: float,
    ) -> AdmissionStats | None:
        """Hand the decision over; the pool's admission counts, or None when it is off."""
        ...

    def forget(self, *, pool: PoolKey) -> None: ...


def picker_pool_name(
    *, pool: PoolKey, spec: InferencePoolSpec, namespaced: bool = False
) -> str | None:
    """The name requests of this pool carry to the picker: its first Envoy cluster, named as
    the xDS server names it (``<namespace>/<cluster>`` in a cluster)."""
    for target in spec.targets:
        if target.envoy is not None:
            return xds_cluster_name(
                namespace=pool.namespace, cluster=target.envoy.cluster, namespaced=namespaced
            )
        if target.envoy_file is not None:
            return target.envoy_file.cluster
    return None


class PickerFeed:
    """The :class:`AdmissionFeed` of a process that serves the picker."""

    def __init__(self, *, pools: PickerPools, namespaced_clusters: bool = False) -> None:
        self._pools = pools
        self._namespaced = namespaced_clusters
        self._names: dict[PoolKey, str] = {}

    def offer(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        members: Sequence[Member],
        samples: Mapping[PodName, PodSample],
        now: float,
    ) -> AdmissionStats | None:
        return self.offer_as(
            name=picker_pool_name(pool=pool, spec=spec, namespaced=self._namespaced),
            pool=pool,
            spec=spec,
            decision=decision,
            members=members,
            samples=samples,
            now=now,
        )

    def offer_as(
        self,
        *,
        name: str | None,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        members: Sequence[Member],
        samples: Mapping[PodName, PodSample],
        now: float,
    ) -> AdmissionStats | None:
        """:meth:`offer` under a given picker pool name (a GIE InferencePool has no cluster)."""
        if spec.admission.mode is AdmissionMode.OFF or name is None or not decision.pods:
            self.forget(pool=pool)
            return None
        previous = self._names.get(pool)
        if previous is not None and previous != name:
            self._pools.remove(pool=previous)
        self._names[pool] = name
        pods = admission.pod_capacities(
            decision=decision,
            samples=samples,
            addresses={m.endpoint.name: m.endpoint.host_port for m in members},
            now=now,
            kv_capacity_tokens=spec.admission.kv_capacity_tokens,
        )
        settings = admission.settings_from_spec(
            admission=spec.admission, stale_after_s=float(spec.metrics.stale_after)
        )
        self._pools.update(pool=name, pods=pods, settings=settings, now=now)
        found = self._pools.get(name)
        return None if found is None else found.stats()

    def forget(self, *, pool: PoolKey) -> None:
        name = self._names.pop(pool, None)
        if name is not None:
            self._pools.remove(pool=name)
