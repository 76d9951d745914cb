"""The ``envoyFile`` target: the ClusterLoadAssignment as a file for Envoy's file-based EDS.

Envoy reads it through ``path_config_source`` with a ``watched_directory`` and only notices a
file that is *moved* into place, so :class:`EdsFileTarget` writes a temporary file in the same
directory and renames it over the old one (atomic; a half-written file is never read, and a
broken one keeps Envoy's old weights). :class:`EdsConfigMapTarget` hands the same content to an
injected :class:`ConfigMapWriter`; the kubelet then swaps the mounted ``..data`` symlink, which
adds its sync delay (tens of seconds): a fallback, not the fast path. Only endpoints travel
this way; the cluster itself (caps, retry budget) is static in the Envoy bootstrap.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2, json_format

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import TargetSyncError, XdsSnapshotInvalid
from trimtab.files import write_atomically
from trimtab.targets.base import TargetState
from trimtab.targets.xds.snapshots import Resource, build_pool_resources

__all__ = ["ConfigMapWriter", "EdsConfigMapTarget", "EdsFileTarget", "render_eds_file"]

_NOT_APPLIED = TargetState(False, TargetReason.NOT_APPLIED, "no decision written yet")


class ConfigMapWriter(Protocol):
    """Writes ``content`` under ``key`` of ConfigMap ``namespace/name`` (create or replace).

    Provided by the controller; raises :class:`TargetSyncError` when the API call fails.
    """

    async def __call__(self, *, namespace: str, name: str, key: str, content: str) -> None: ...


def render_eds_file(resource: Resource) -> str:
    """A DiscoveryResponse (JSON) holding one ClusterLoadAssignment, as file EDS expects."""
    response = discovery_pb2.DiscoveryResponse(
        version_info=resource.digest,
        resources=[any_pb2.Any(type_url=resource.type_url, value=resource.payload)],
    )
    text: str = json_format.MessageToJson(response, indent=1, sort_keys=True)
    return text + "\n"


class _EdsContentTarget(abc.ABC):
    """Shared part: render a pool's endpoints once per change and remember the outcome."""

    def __init__(self, *, cluster: str) -> None:
        self._cluster = cluster
        self._written: dict[PoolKey, str] = {}
        self._states: dict[PoolKey, TargetState] = {}

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
        except XdsSnapshotInvalid as exc:
            raise TargetSyncError(str(exc), reason=TargetReason.INVALID_DECISION) from exc
        digest = resources.load_assignment.digest
        if self._written.get(pool) == digest:
            return self.state(pool=pool)
        message = await self._publish(pool=pool, content=render_eds_file(resources.load_assignment))
        self._written[pool] = digest
        self._states[pool] = TargetState(True, TargetReason.SYNCED, message)
        return self._states[pool]

    @abc.abstractmethod
    async def _publish(self, *, pool: PoolKey, content: str) -> str:
        """Write ``content`` where Envoy reads it; return a message for the condition."""

    def state(self, *, pool: PoolKey) -> TargetState:
        return self._states.get(pool, _NOT_APPLIED)

    async def remove(self, *, pool: PoolKey) -> None:
        # The file or key is left in place: Envoy keeps serving its last endpoints.
        self._written.pop(pool, None)
        self._states.pop(pool, None)


class EdsFileTarget(_EdsContentTarget):
    """Writes ``path`` by atomic rename; Envoy watches the file's directory."""

    def __init__(self, *, cluster: str, path: Path, max_bytes: int | None = None) -> None:
        super().__init__(cluster=cluster)
        self._path = path
        self._max_bytes = max_bytes

    @property
    def name(self) -> str:
        return f"envoyFile:{self._path}"

    async def _publish(self, *, pool: PoolKey, content: str) -> str:
        if self._max_bytes is not None and len(content.encode()) > self._max_bytes:
            raise TargetSyncError(
                f"not writing {self._path}: {len(content.encode())} bytes, over {self._max_bytes}",
                reason=TargetReason.EDS_WRITE_FAILED,
            )
        try:
            await asyncio.to_thread(write_atomically, self._path, content)
        except OSError as exc:
            raise TargetSyncError(
                f"cannot write {self._path}: {exc}", reason=TargetReason.EDS_WRITE_FAILED
            ) from exc
        return f"written to {self._path}"


class EdsConfigMapTarget(_EdsContentTarget):
    """Writes key ``<cluster>.json`` of a ConfigMap through the injected writer."""

    def __init__(self, *, cluster: str, config_map: str, write: ConfigMapWriter) -> None:
        super().__init__(cluster=cluster)
        self._config_map = config_map
        self._write = write

    @property
    def name(self) -> str:
        return f"envoyFile:configmap/{self._config_map}"

    async def _publish(self, *, pool: PoolKey, content: str) -> str:
        await self._write(
            namespace=pool.namespace,
            name=self._config_map,
            key=f"{self._cluster}.json",
            content=content,
        )
        return f"written to ConfigMap {self._config_map}; the kubelet syncs it within ~1 min"
