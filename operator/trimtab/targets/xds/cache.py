"""The snapshot the xDS server serves, behind a ready gate.

The controller (through :class:`trimtab.targets.envoy_xds.EnvoyXdsTarget`) sets one
:class:`PoolResources` per Envoy cluster; the cache rebuilds the :class:`Snapshot` and wakes the
ADS streams. In state-of-the-world CDS, a cluster missing from a response is *removed* from
Envoy, and Envoy keeps its last config while it waits for a response. So until the controller
calls :meth:`SnapshotCache.open` (every known pool has a restored or fresh decision),
:meth:`SnapshotCache.current` returns ``None`` and the server answers nothing: a restarted
trimtab never replaces real weights with defaults or drops a pool it has not restored yet.
"""

from __future__ import annotations

from collections.abc import Callable

from trimtab.api.reasons import TargetReason
from trimtab.api.records import PoolKey
from trimtab.targets.base import TargetState
from trimtab.targets.xds.acks import AckLedger
from trimtab.targets.xds.snapshots import TYPE_URLS, PoolResources, Snapshot, build_snapshot

__all__ = ["SnapshotCache"]

Listener = Callable[[], None]


class SnapshotCache:
    """One snapshot shared by every connected Envoy, plus the observed ACK state."""

    def __init__(self, *, acks: AckLedger | None = None, served: bool = True) -> None:
        """``served=False``: no xDS server reads this cache (local mode without --xds-port)."""
        self._pools: dict[str, PoolResources] = {}
        self._served = served
        self._snapshot = build_snapshot(())
        self._ready = False
        self._listeners: set[Listener] = set()
        self.acks = acks or AckLedger()

    @property
    def ready(self) -> bool:
        return self._ready

    def open(self) -> None:
        """Open the ready gate: from now on the server answers with the snapshot."""
        if not self._ready:
            self._ready = True
            self._notify()

    def current(self) -> Snapshot | None:
        """The snapshot to serve, or ``None`` while the ready gate is closed."""
        return self._snapshot if self._ready else None

    def set_pool(self, resources: PoolResources) -> None:
        """Serve ``resources``; another pool's cluster raises :class:`~trimtab.errors.XdsConflict`.

        The served snapshot is left as it was then: :func:`build_snapshot`, the one place that
        checks for conflicts, sees the other pool's claim beside this one before anything is set.
        """
        owner = self._pools.get(resources.name)
        if owner == resources:
            return
        replaced = owner if owner is not None and owner.pool == resources.pool else None
        others = [pool for pool in self._pools.values() if pool is not replaced]
        self._snapshot = build_snapshot([*others, resources])
        self._pools[resources.name] = resources
        if self._ready:
            self._notify()

    def remove(self, *, cluster: str, pool: PoolKey) -> None:
        """Stop serving ``cluster`` if ``pool`` owns it (Envoy then removes the cluster)."""
        owner = self._pools.get(cluster)
        if owner is not None and owner.pool == pool:
            del self._pools[cluster]
            self._rebuild()

    def cluster_state(self, *, cluster: str, pool: PoolKey) -> TargetState:
        resources = self._pools.get(cluster)
        if resources is None or resources.pool != pool:
            message = f"no decision set for cluster {cluster}"
            return TargetState(False, TargetReason.NOT_APPLIED, message)
        if not self._served:
            message = "no xDS server (run with --xds-port)"
            return TargetState(False, TargetReason.TARGET_UNAVAILABLE, message)
        if not self._ready:
            return TargetState(
                False,
                TargetReason.XDS_NOT_READY,
                "held until every pool has a restored or fresh decision",
            )
        digests = {type_url: resources.of_type(type_url).digest for type_url in TYPE_URLS}
        return self.acks.cluster_state(cluster, digests=digests)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every change of the served snapshot; returns an unsubscribe."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    def _rebuild(self) -> None:
        self._snapshot = build_snapshot(self._pools.values())
        if self._ready:
            self._notify()

    def _notify(self) -> None:
        for listener in tuple(self._listeners):
            listener()
