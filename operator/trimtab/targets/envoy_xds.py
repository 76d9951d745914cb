"""The ``envoy`` target: a pool's decision served by trimtab's own xDS server.

One instance per ``targets[].envoy`` entry (one Envoy cluster). ``apply`` builds the pool's
resources and sets them in the shared :class:`SnapshotCache`; the ADS streams push them.
Whether Envoy took them arrives later, so ``state`` reads the ACK ledger: ``Synced`` once
every connected Envoy acknowledged the cluster's current resources, ``EnvoyNack`` with
Envoy's message if one rejected them, ``XdsNotReady`` while the ready gate is closed.
"""

from __future__ import annotations

from collections.abc import Mapping

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import TargetSyncError, XdsConflict, XdsSnapshotInvalid
from trimtab.targets.base import TargetState
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.snapshots import build_pool_resources

__all__ = ["EnvoyXdsTarget"]


class EnvoyXdsTarget:
    """Feeds one Envoy cluster of a pool into the xDS server's cache."""

    def __init__(self, *, cache: SnapshotCache, cluster: str) -> None:
        self._cache = cache
        self._cluster = cluster

    @property
    def name(self) -> str:
        return f"envoy:{self._cluster}"

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        try:
            resources = build_pool_resources(
                pool=pool, cluster=self._cluster, spec=spec, decision=decision, endpoints=endpoints
            )
            self._cache.set_pool(resources)
        except XdsSnapshotInvalid as exc:
            raise TargetSyncError(str(exc), reason=TargetReason.INVALID_DECISION) from exc
        except XdsConflict as exc:
            raise TargetSyncError(str(exc), reason=TargetReason.CLUSTER_CONFLICT) from exc
        return self.state(pool=pool)

    def state(self, *, pool: PoolKey) -> TargetState:
        return self._cache.cluster_state(cluster=self._cluster, pool=pool)

    async def remove(self, *, pool: PoolKey) -> None:
        self._cache.remove(cluster=self._cluster, pool=pool)
