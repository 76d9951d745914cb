"""Build a pool's targets from ``spec.targets``.

``envoy`` entries feed the process-wide :class:`~trimtab.targets.xds.cache.SnapshotCache`
served by the built-in xDS server; ``envoyFile`` writes a file or (in a cluster) a ConfigMap;
``gatewayAPI`` writes HTTPRoute weight tiers through an injected writer (Kubernetes only).

Tenancy rules (docs/envoy.md): with ``namespaced_clusters`` (in a cluster) the xDS cluster of
``envoy: {cluster: C}`` in namespace ``N`` is ``N/C``, so no tenant can claim another's
cluster; an ``envoyFile.path`` must resolve (symlinks followed) inside ``envoy_file_dir``, and
without one path targets are refused. Refusals raise :class:`~trimtab.errors.NotAllowed`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import NotAllowed, TargetSyncError
from trimtab.targets.base import Target, TargetState
from trimtab.targets.envoy_file import ConfigMapWriter, EdsConfigMapTarget, EdsFileTarget
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.gatewayapi.target import (
    GatewayAPITierTarget,
    GatewayAPIWriter,
    gateway_api_target_name,
)
from trimtab.targets.xds.cache import SnapshotCache

__all__ = ["BuiltinTargets", "TargetSettings", "UnavailableTarget", "xds_cluster_name"]

# One file per pool of at most 1000 endpoints stays well below this.
_MAX_ENVOY_FILE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, kw_only=True)
class TargetSettings:
    """What the installer allows pools to write to."""

    envoy_file_dir: Path | None = None
    """``envoyFile.path`` targets must resolve inside this directory; ``None``: refused."""
    namespaced_clusters: bool = False
    """Serve ``envoy`` targets as ``<namespace>/<cluster>`` (in a cluster)."""
    max_envoy_file_bytes: int = _MAX_ENVOY_FILE_BYTES


def xds_cluster_name(*, namespace: str, cluster: str, namespaced: bool) -> str:
    """The Envoy cluster a pool's ``envoy`` target is served as (namespaces hold no ``/``)."""
    return f"{namespace}/{cluster}" if namespaced else cluster


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

    def __init__(
        self,
        *,
        cache: SnapshotCache,
        config_maps: ConfigMapWriter | None,
        settings: TargetSettings | None = None,
        gateway_api: GatewayAPIWriter | None = None,
    ) -> None:
        self._cache = cache
        self._config_maps = config_maps
        self._settings = settings or TargetSettings()
        self._gateway_api = gateway_api

    def build(self, *, pool: PoolKey, spec: InferencePoolSpec) -> Sequence[Target]:
        """The pool's targets; :class:`NotAllowed` when one asks for what is not allowed."""
        built: list[Target] = []
        for index, entry in enumerate(spec.targets):
            if entry.envoy is not None:
                cluster = xds_cluster_name(
                    namespace=pool.namespace,
                    cluster=entry.envoy.cluster,
                    namespaced=self._settings.namespaced_clusters,
                )
                built.append(EnvoyXdsTarget(cache=self._cache, cluster=cluster))
            elif entry.envoy_file is not None and entry.envoy_file.path is not None:
                path = self._confined(
                    raw=entry.envoy_file.path, field=f"spec.targets[{index}].envoyFile.path"
                )
                built.append(
                    EdsFileTarget(
                        cluster=entry.envoy_file.cluster,
                        path=path,
                        max_bytes=self._settings.max_envoy_file_bytes,
                    )
                )
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
                if self._gateway_api is None:
                    message = (
                        "the gatewayAPI target needs Kubernetes with the Gateway API enabled in "
                        "trimtab (chart: targets.gatewayAPI.enabled=true); local mode has no "
                        "HTTPRoutes: use an envoy or envoyFile target"
                    )
                    name = gateway_api_target_name(entry.gateway_api)
                    built.append(UnavailableTarget(name=name, message=message))
                else:
                    built.append(
                        GatewayAPITierTarget(spec=entry.gateway_api, write=self._gateway_api)
                    )
        return built

    def _confined(self, *, raw: str, field: str) -> Path:
        root = self._settings.envoy_file_dir
        if root is None:
            raise NotAllowed(
                [
                    f"{field}: file targets are off in this installation (the operator runs "
                    "without --envoy-file-dir); use envoyFile.configMap or envoy"
                ]
            )
        path = Path(raw)
        if ".." in path.parts:
            raise NotAllowed([f"{field}: must not contain '..'"])
        base = root.resolve()
        # resolve() follows every symlink that exists, so a link cannot lead outside.
        resolved = path.resolve()
        if resolved == base or not resolved.is_relative_to(base):
            raise NotAllowed([f"{field}: must be a file inside {base} (--envoy-file-dir)"])
        return resolved
