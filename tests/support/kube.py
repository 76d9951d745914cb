"""A Kubernetes API for tests: kmock's KubernetesEmulator taught what kopf and trimtab need.

kmock stores objects, serves list/watch/get/create/patch/delete and discovery. This module
adds what a real API server does and kopf relies on: ``resourceVersion`` on every write (kopf's
JSON patches test it), JSON patch with a failing ``test`` answered 422, merge-patch
preconditions on ``metadata.resourceVersion`` (409, for Leases), ``generateName``, ``uid``,
``metadata.generation`` bumped on spec changes only, and the status subresource (status
patches touch only status; main-resource patches never touch it). It serves the
InferencePool CRD from ``crds/`` because kopf waits for the CRD resource before watching.

Not emulated: label or field selectors, server-side watch bookmarks and timeouts, list
chunking, strategic merge patch, admission and OpenAPI validation.

Use the ``kube`` fixture (re-export it from a conftest) and drive it over HTTP through
:class:`Cluster`, so that watchers see every change as a real watch event.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import kopf
import pytest_asyncio
import yaml

__all__ = ["Cluster", "TrimtabKube", "kube", "merge_diff"]

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "inferencepool.yaml"
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}
POOLS = "trimtab.io/v1alpha1/inferencepools"
CRDS = "apiextensions.k8s.io/v1/customresourcedefinitions"


@attrs.define(kw_only=True)
class TrimtabKube(kmock.KubernetesEmulator):
    """KubernetesEmulator with resourceVersion, generation, JSON patch and status subresource."""

    _versions: Any = attrs.field(factory=lambda: itertools.count(1), init=False)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock 0.8 cannot parse the path of the namespaces collection itself. Answer as a
        # namespace-scoped RBAC would: kopf then serves exactly the namespaces it was given.
        if raw_request.path.rstrip("/") == "/api/v1/namespaces":
            await raw_request.read()
            status = {"kind": "Status", "apiVersion": "v1", "code": 403, "reason": "Forbidden"}
            return aiohttp.web.json_response(status, status=403)
        return await super().__call__(raw_request)

    async def _handle(self, request: kmock.Request) -> Any:
        original = request
        if request.resource is not None and request.action == kmock.action.CREATE:
            request = attrs.evolve(request, data=self._created(request))
        elif request.resource is not None and request.action == kmock.action.UPDATE:
            request = attrs.evolve(request, data=self._patched(request))
        if request is not original:
            # kmock matches reactions against its request log by identity: log the new one.
            index = next(i for i, seen in enumerate(self._requests) if seen is original)
            self._requests[index] = request
        return await super()._handle(request)

    def _next_version(self) -> str:
        return str(next(self._versions))

    def _created(self, request: kmock.Request) -> dict[str, Any]:
        data = copy.deepcopy(request.data or {})
        meta = data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{meta['generateName']}{uuid.uuid4().hex[:5]}"
        if request.namespace and not meta.get("namespace"):
            meta["namespace"] = request.namespace
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta["resourceVersion"] = self._next_version()
        meta["generation"] = 1
        return data

    def _patched(self, request: kmock.Request) -> dict[str, Any]:
        assert request.resource is not None
        key = (request.resource, request.namespace, request.name or "")
        if key not in self.objects or self.objects[key].deleted:
            return request.data  # type: ignore[no-any-return]  # kmock answers 404 itself
        current: dict[str, Any] = copy.deepcopy(self.objects[key].raw)
        if isinstance(request.data, list):
            try:
                new = jsonpatch.apply_patch(current, request.data, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                raise kmock.KubernetesError(status=422, reason="Invalid", message=str(exc)) from exc
            patch = merge_diff(current, new)
        else:
            patch = copy.deepcopy(dict(request.data or {}))
            wanted = patch.get("metadata", {}).pop("resourceVersion", None)
            if wanted is not None and wanted != current["metadata"].get("resourceVersion"):
                raise kmock.KubernetesError(status=409, reason="Conflict", message="stale")
        if "status" in self.resources[request.resource].subresources:
            if request.subresource == "status":
                patch = {"status": patch["status"]} if "status" in patch else {}
            else:
                patch.pop("status", None)
        meta = patch.setdefault("metadata", {})
        if "spec" in patch and _merged(current.get("spec"), patch["spec"]) != current.get("spec"):
            meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        meta["resourceVersion"] = self._next_version()
        return patch


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7386 merge patch that turns ``old`` into ``new``."""
    patch: dict[str, Any] = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(before, Mapping) and isinstance(value, Mapping):
            nested = merge_diff(before, value)
            if nested:
                patch[key] = nested
        elif key not in old or before != value:
            patch[key] = value
    return patch


def _merged(old: Any, patch: Any) -> Any:
    if not isinstance(old, Mapping) or not isinstance(patch, Mapping):
        return patch
    result = dict(old)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merged(old.get(key), value)
    return result


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _teach(kube: TrimtabKube) -> None:
    info = kmock.ResourceInfo
    kube.resources[CRDS] = info(
        kind="CustomResourceDefinition",
        singular="customresourcedefinition",
        namespaced=False,
        verbs=VERBS,
    )
    kube.resources[POOLS] = info(
        kind="InferencePool",
        singular="inferencepool",
        namespaced=True,
        verbs=VERBS,
        shortnames={"ipool"},
        categories={"trimtab", "inference"},
        subresources={"status"},
    )
    kube.resources["v1/pods"] = info(kind="Pod", singular="pod", namespaced=True, verbs=VERBS)
    kube.resources["v1/events"] = info(kind="Event", singular="event", namespaced=True, verbs=VERBS)
    kube.resources["v1/secrets"] = info(
        kind="Secret", singular="secret", namespaced=True, verbs=VERBS
    )
    kube.resources["v1/configmaps"] = info(
        kind="ConfigMap", singular="configmap", namespaced=True, verbs=VERBS
    )
    kube.resources["coordination.k8s.io/v1/leases"] = info(
        kind="Lease", singular="lease", namespaced=True, verbs=VERBS
    )
    # kopf waits for the namespaces resource before it watches anything (see __call__).
    kube.resources["v1/namespaces"] = info(
        kind="Namespace", singular="namespace", namespaced=False, verbs=VERBS
    )
    crd = yaml.safe_load(CRD_PATH.read_text())
    kube.objects[CRDS, None, crd["metadata"]["name"]] = crd


class Cluster:
    """Test-side verbs over HTTP, so every change reaches the watchers as an event."""

    def __init__(self, kube: TrimtabKube) -> None:
        self.kube = kube
        self.connection = kopf.ConnectionInfo(server=str(kube.url).rstrip("/"))

    async def create_pool(self, *, namespace: str, name: str, spec: Mapping[str, Any]) -> None:
        body = {
            "apiVersion": "trimtab.io/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"name": name, "namespace": namespace},
            "spec": dict(spec),
        }
        await self._ok(
            self.kube.post(
                f"/apis/trimtab.io/v1alpha1/namespaces/{namespace}/inferencepools", json=body
            )
        )

    async def patch_pool(self, *, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        url = f"/apis/trimtab.io/v1alpha1/namespaces/{namespace}/inferencepools/{name}"
        headers = {"Content-Type": "application/merge-patch+json"}
        await self._ok(self.kube.patch(url, json=dict(patch), headers=headers))

    async def delete_pool(self, *, namespace: str, name: str) -> None:
        url = f"/apis/trimtab.io/v1alpha1/namespaces/{namespace}/inferencepools/{name}"
        await self._ok(self.kube.delete(url))

    def pool(self, *, namespace: str, name: str) -> dict[str, Any] | None:
        for (resource, ns, found), obj in self.kube.objects.items():
            if resource == kmock.resource(POOLS) and (ns, found) == (namespace, name):
                return None if obj.deleted else obj.raw
        return None

    async def put_pod(
        self,
        *,
        namespace: str,
        name: str,
        labels: Mapping[str, str],
        ip: str,
        ready: bool = True,
        ready_since: str | None = None,
    ) -> None:
        """Create the pod, or replace its labels and status (as the kubelet would)."""
        status = {
            "podIP": ip,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": ready_since or _now(),
                }
            ],
        }
        existing = [
            obj
            for (resource, ns, found), obj in self.kube.objects.items()
            if resource == kmock.resource("v1/pods") and (ns, found) == (namespace, name)
        ]
        if existing and not existing[0].deleted:
            headers = {"Content-Type": "application/merge-patch+json"}
            patch = {"metadata": {"labels": dict(labels)}, "status": status}
            url = f"/api/v1/namespaces/{namespace}/pods/{name}"
            await self._ok(self.kube.patch(url, json=patch, headers=headers))
            return
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {"containers": [{"name": "engine", "image": "vllm"}]},
            "status": status,
        }
        await self._ok(self.kube.post(f"/api/v1/namespaces/{namespace}/pods", json=body))

    async def delete_pod(self, *, namespace: str, name: str) -> None:
        await self._ok(self.kube.delete(f"/api/v1/namespaces/{namespace}/pods/{name}"))

    def events(self, *, namespace: str, reason: str | None = None) -> list[dict[str, Any]]:
        found = []
        for (resource, ns, _), obj in self.kube.objects.items():
            is_event = resource == kmock.resource("v1/events") and ns == namespace
            if is_event and not obj.deleted and reason in (None, obj.raw.get("reason")):
                found.append(obj.raw)
        return found

    @staticmethod
    async def _ok(call: Any) -> None:
        async with call as response:
            if response.status >= 400:
                raise AssertionError(f"HTTP {response.status}: {await response.text()}")


@pytest_asyncio.fixture()
async def kube() -> AsyncIterator[Cluster]:
    """A fresh emulated API server on 127.0.0.1 with trimtab's resources."""
    async with TrimtabKube() as handler, kmock.Server(handler):
        _teach(handler)
        yield Cluster(handler)
