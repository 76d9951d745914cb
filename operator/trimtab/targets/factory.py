"""Build a pool's targets from ``spec.targets``.

``envoy`` entries feed the process-wide :class:`~trimtab.targets.xds.cache.SnapshotCache`
served by the built-in xDS server; ``envoyFile`` writes a file or (in a cluster) a ConfigMap;
``gatewayAPI`` has no implementation yet and reports ``TargetUnavailable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import TargetSyncError
from trimtab.targets.base import Target, TargetState
from trimtab.targets.envoy_file import ConfigMapWriter, EdsConfigMapTarget, EdsFileTarget
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.cache import SnapshotCache

__all__ = ["BuiltinTargets", "UnavailableTarget"]


class UnavailableTarget:
    """A target this build or mode cannot serve; always unsynced, with the reason why."""

    def __init__(self, *, name: str, message: str) -> None:
        self._name = name
        self._message = message

    @property
    def name(self) -> str:
        return self._name

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        raise TargetSyncError(self._message, reason=TargetReason.TARGET_UNAVAILABLE)

    def state(self, *, pool: PoolKey) -> TargetState:
        return TargetState(False, TargetReason.TARGET_UNAVAILABLE, self._message)

    async def remove(self, *, pool: PoolKey) -> None:
        return None


class BuiltinTargets:
    """The :class:`~trimtab.balancing.loop.TargetFactory` of the operator and local mode."""

    def __init__(self, *, cache: SnapshotCache, config_maps: ConfigMapWriter | None) -> None:
        self._cache = cache
        self._config_maps = config_maps

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]:
        built: list[Target] = []
        for entry in spec.targets:
            if entry.envoy is not None:
                built.append(EnvoyXdsTarget(cache=self._cache, cluster=entry.envoy.cluster))
            elif entry.envoy_file is not None and entry.envoy_file.path is not None:
                path = Path(entry.envoy_file.path)
                built.append(EdsFileTarget(cluster=entry.envoy_file.cluster, path=path))
            elif entry.envoy_file is not None and entry.envoy_file.config_map is not None:
                name = f"envoyFile:configmap/{entry.envoy_file.config_map}"
                if self._config_maps is None:
                    message = "ConfigMap targets need Kubernetes; use envoyFile.path locally"
                    built.append(UnavailableTarget(name=name, message=message))
                else:
                    built.append(
                        EdsConfigMapTarget(
                            cluster=entry.envoy_file.cluster,
                            config_map=entry.envoy_file.config_map,
                            write=self._config_maps,
                        )
                    )
            elif entry.gateway_api is not None:
                message = (
                    "the gatewayAPI target is not implemented yet in this version of trimtab; "
                    "use an envoy or envoyFile target"
                )
                name = f"gatewayAPI:{entry.gateway_api.http_route}"
                built.append(UnavailableTarget(name=name, message=message))
        return built
