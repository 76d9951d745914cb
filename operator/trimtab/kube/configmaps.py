"""Write one key of a ConfigMap through the API: the ``envoyFile.configMap`` target's writer.

Merge-patches the key (so other keys stay), creating the ConfigMap on first use. Errors become
:class:`~trimtab.errors.TargetSyncError` so the target driver retries with backoff.
"""

from __future__ import annotations

from trimtab.api.reasons import TargetReason
from trimtab.errors import KubeApiError, KubeNotFound, TargetSyncError
from trimtab.kube.client import KubeApi

__all__ = ["KubeConfigMapWriter"]


class KubeConfigMapWriter:
    def __init__(self, *, api: KubeApi) -> None:
        self._api = api

    async def __call__(self, *, namespace: str, name: str, key: str, content: str) -> None:
        base = f"/api/v1/namespaces/{namespace}/configmaps"
        try:
            try:
                await self._api.merge_patch(f"{base}/{name}", {"data": {key: content}})
            except KubeNotFound:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": namespace},
                    "data": {key: content},
                }
                await self._api.create(base, body)
        except KubeApiError as exc:
            raise TargetSyncError(
                f"ConfigMap {namespace}/{name}: {exc}", reason=TargetReason.CONFIG_MAP_WRITE_FAILED
            ) from exc
