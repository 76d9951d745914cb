"""The API side of the gatewayAPI target: :class:`KubeGatewayAPIWriter`.

Kubernetes RBAC cannot limit writes by label, so the chart grants create/update/delete on
every Service and EndpointSlice of the watched namespaces; this writer is what limits them.
It updates or deletes an object only after reading it and finding the target's labels
(``trimtab.io/pool`` and ``trimtab.io/target``) on it, and then only with the
resourceVersion (update) or uid and resourceVersion (delete) it read, so an object another
party replaced in between is left alone. A name already taken by an object without those
labels is reported (``ObjectNotOwned``), never overwritten. Verbs used: get, list, create,
update (PUT) and delete on Services and EndpointSlices; get and patch on HTTPRoutes; list on
ReferenceGrants. The HTTPRoute is changed only by
the JSON patch the target builds (one rule's backendRefs, tested against resourceVersion),
sent with field manager ``trimtab``.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from trimtab.api.reasons import TargetReason
from trimtab.api.records import PoolKey
from trimtab.api.resource import GROUP, PLURAL, VERSION
from trimtab.errors import KubeApiError, KubeConflict, KubeNotFound, TargetSyncError
from trimtab.kube.client import KubeApi
from trimtab.targets.gatewayapi.target import FIELD_MANAGER, OwnedObjects

__all__ = ["KubeGatewayAPIWriter", "collection_path"]

GATEWAY_GROUP = "gateway.networking.k8s.io"
_COLLECTIONS = {
    "Service": "/api/v1/namespaces/{namespace}/services",
    "EndpointSlice": "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices",
    "HTTPRoute": f"/apis/{GATEWAY_GROUP}/v1/namespaces/{{namespace}}/httproutes",
    # v1beta1 is served by every Gateway API release that has ReferenceGrant.
    "ReferenceGrant": f"/apis/{GATEWAY_GROUP}/v1beta1/namespaces/{{namespace}}/referencegrants",
}
_MANAGED = {"Service": ("spec",), "EndpointSlice": ("addressType", "endpoints", "ports")}
_WRITE = f"?fieldManager={FIELD_MANAGER}"


def collection_path(kind: str, *, namespace: str) -> str:
    return _COLLECTIONS[kind].format(namespace=namespace)


class KubeGatewayAPIWriter:
    """Implements :class:`trimtab.targets.gatewayapi.target.GatewayAPIWriter`."""

    def __init__(self, *, api: KubeApi) -> None:
        self._api = api

    async def pool_uid(self, *, pool: PoolKey) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{pool.namespace}/{PLURAL}/{pool.name}"
        body = await self._call(self._api.get(path), what=f"InferencePool {pool}")
        uid = body.get("metadata", {}).get("uid")
        if not uid:
            raise TargetSyncError(
                f"InferencePool {pool} has no uid", reason=TargetReason.GATEWAY_API_WRITE_FAILED
            )
        return str(uid)

    async def get_route(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        path = f"{collection_path('HTTPRoute', namespace=namespace)}/{name}"
        try:
            return await self._api.get(path)
        except KubeNotFound:
            return None
        except KubeApiError as exc:
            raise _failed(f"HTTPRoute {namespace}/{name}", exc) from exc

    async def patch_route(
        self, *, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any]:
        path = f"{collection_path('HTTPRoute', namespace=namespace)}/{name}{_WRITE}"
        try:
            return await self._api.json_patch(path, [dict(op) for op in ops])
        except (KubeConflict, KubeNotFound) as exc:
            raise KubeConflict(str(exc), status=exc.status) from exc
        except KubeApiError as exc:
            raise _failed(f"HTTPRoute {namespace}/{name}", exc) from exc

    async def reference_grants(self, *, namespace: str) -> Sequence[Mapping[str, Any]]:
        path = collection_path("ReferenceGrant", namespace=namespace)
        try:
            body = await self._api.get(path)
        except KubeNotFound:
            return ()  # the ReferenceGrant CRD is not installed
        except KubeApiError as exc:
            raise _failed(f"ReferenceGrants of {namespace}", exc) from exc
        return list(body.get("items") or [])

    async def list_owned(self, *, namespace: str, labels: Mapping[str, str]) -> OwnedObjects:
        selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in sorted(labels.items())))
        found: dict[str, list[Mapping[str, Any]]] = {}
        for kind in ("Service", "EndpointSlice"):
            path = f"{collection_path(kind, namespace=namespace)}?labelSelector={selector}"
            body = await self._call(self._api.get(path), what=f"{kind}s of {namespace}")
            # Filtered again here: what is acted on must carry the labels, whatever the server.
            found[kind] = [item for item in body.get("items") or [] if _carries(item, labels)]
        return OwnedObjects(services=found["Service"], slices=found["EndpointSlice"])

    async def put(self, obj: Mapping[str, Any], *, labels: Mapping[str, str]) -> None:
        kind = str(obj["kind"])
        meta = obj["metadata"]
        collection = collection_path(kind, namespace=meta["namespace"])
        what = f"{kind} {meta['namespace']}/{meta['name']}"
        try:
            existing = await self._api.get(f"{collection}/{meta['name']}")
        except KubeNotFound:
            await self._call(self._api.create(f"{collection}{_WRITE}", dict(obj)), what=what)
            return
        except KubeApiError as exc:
            raise _failed(what, exc) from exc
        if not _carries(existing, labels):
            raise TargetSyncError(
                f"{what} exists and is not trimtab's (no {', '.join(labels)} labels); "
                "rename or delete it",
                reason=TargetReason.OBJECT_NOT_OWNED,
            )
        old_meta = existing.get("metadata", {})
        unchanged = (
            all(_contains(existing.get(f), obj[f]) for f in _MANAGED[kind] if f in obj)
            and _contains(old_meta.get("labels"), meta["labels"])
            and old_meta.get("ownerReferences") == meta.get("ownerReferences")
        )
        if unchanged:
            return
        # A PUT of what was read, with trimtab's fields replaced: the server-assigned ones
        # (a Service's clusterIP) stay, and the resourceVersion read makes it conditional.
        body = {**existing, **{f: obj[f] for f in _MANAGED[kind] if f in obj}}
        if kind == "Service":
            body["spec"] = {**existing.get("spec", {}), **obj["spec"]}
        body["metadata"] = {
            **old_meta,
            "labels": {**(old_meta.get("labels") or {}), **meta["labels"]},
            "ownerReferences": meta.get("ownerReferences"),
        }
        body.pop("status", None)
        await self._call(self._api.replace(f"{collection}/{meta['name']}{_WRITE}", body), what=what)

    async def delete(
        self, *, kind: str, namespace: str, name: str, labels: Mapping[str, str]
    ) -> None:
        path = f"{collection_path(kind, namespace=namespace)}/{name}"
        what = f"{kind} {namespace}/{name}"
        try:
            existing = await self._api.get(path)
        except KubeNotFound:
            return
        except KubeApiError as exc:
            raise _failed(what, exc) from exc
        if not _carries(existing, labels):
            return
        meta = existing.get("metadata", {})
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
            "preconditions": {
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        try:
            await self._api.delete(path, body)
        except KubeNotFound:
            return
        except KubeApiError as exc:
            raise _failed(what, exc) from exc

    @staticmethod
    async def _call(call: Any, *, what: str) -> dict[str, Any]:
        try:
            result: dict[str, Any] = await call
        except KubeApiError as exc:
            raise _failed(what, exc) from exc
        return result


def _carries(obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    present = obj.get("metadata", {}).get("labels") or {}
    return all(present.get(key) == value for key, value in labels.items())


def _contains(have: Any, want: Any) -> bool:
    """Whether ``have`` already holds ``want`` (extra fields the server defaulted are fine)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(_contains(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(have) == len(want)
            and all(_contains(h, w) for h, w in zip(have, want, strict=True))
        )
    return bool(have == want)


def _failed(what: str, exc: KubeApiError) -> TargetSyncError:
    hint = (
        " (RBAC: install the chart with targets.gatewayAPI.enabled=true)"
        if exc.status == 403
        else ""
    )
    return TargetSyncError(f"{what}: {exc}{hint}", reason=TargetReason.GATEWAY_API_WRITE_FAILED)
