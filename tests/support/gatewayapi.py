"""Gateway API helpers of the tests: the real upstream CRDs, schema validation, and an
in-memory :class:`GatewayAPIWriter` that checks the serving invariant after every write.

The CRDs come unmodified from ``../shared/third_party`` (see its README). Validation uses
``jsonschema`` on the structural OpenAPI schema of the served version, which carries
``maxItems`` (16 rules, 16 backendRefs), the weight range 0..1,000,000, patterns and enums;
CEL rules (``x-kubernetes-validations``) are not evaluated.
"""

from __future__ import annotations

import copy
import functools
import itertools
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonpatch
import jsonschema
import kubernetes_validate
import yaml

from trimtab.api.records import PoolKey
from trimtab.errors import KubeConflict, TargetSyncError
from trimtab.targets.gatewayapi.target import OwnedObjects

__all__ = [
    "GATEWAY_API",
    "GIE",
    "MemoryGatewayWriter",
    "crd",
    "serving_problems",
    "validate_core",
    "validate_custom",
]

SHARED = Path(__file__).resolve().parents[3] / "shared" / "third_party"
GATEWAY_API = SHARED / "gateway-api-v1.6.1"
GIE = SHARED / "gateway-api-inference-extension-v1.6.0"
K8S_VERSION = "1.35.0"


def crd(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


@functools.cache
def _validator(path: Path, version: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(_schema(path, version))


def _schema(path: Path, version: str) -> dict[str, Any]:
    for entry in crd(path)["spec"]["versions"]:
        if entry["name"] == version:
            schema: dict[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise AssertionError(f"{path.name} serves no {version}")


def validate_custom(obj: Mapping[str, Any], *, crd_file: Path, version: str) -> None:
    """Raise jsonschema.ValidationError unless ``obj`` fits the CRD's structural schema."""
    _validator(crd_file, version).validate(dict(obj))


def validate_core(obj: Mapping[str, Any]) -> None:
    """Strict (unknown fields fail) validation of a core object against Kubernetes' OpenAPI."""
    kubernetes_validate.validate(dict(obj), K8S_VERSION, strict=True)


def route(
    *, namespace: str, name: str, rules: Sequence[Mapping[str, Any]], gateway: str = "gw"
) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "parentRefs": [{"name": gateway}],
            "rules": [dict(rule) for rule in rules],
        },
    }


def serving_problems(
    *,
    route: Mapping[str, Any],
    index: int,
    services: Mapping[str, Any],
    slices: Mapping[str, Any],
    namespace: str,
    foreign: set[str],
) -> list[str]:
    """What would fail traffic in this state: a weighted backend that is missing or has no
    endpoint, or a rule whose weights sum to 0. ``foreign`` names backends that are not
    trimtab's (assumed to serve)."""
    refs = route["spec"]["rules"][index].get("backendRefs") or []
    problems = []
    if refs and sum(int(r.get("weight", 1)) for r in refs) == 0:
        problems.append("every weight is 0")
    for ref in refs:
        name = ref["name"]
        if int(ref.get("weight", 1)) == 0 or name in foreign:
            continue
        if name not in services:
            problems.append(f"{name} weighted but has no Service")
            continue
        endpoints = [
            e
            for s in slices.values()
            if s["metadata"]["labels"].get("kubernetes.io/service-name") == name
            and s["metadata"]["namespace"] == namespace
            for e in s.get("endpoints") or []
        ]
        if not endpoints:
            problems.append(f"{name} weighted but empty")
    return problems


class MemoryGatewayWriter:
    """A GatewayAPIWriter over dicts; after each write it records the serving problems."""

    def __init__(
        self, *, pool_uid: str = "pool-uid", foreign: set[str] | None = None, strict: bool = True
    ) -> None:
        self.strict = strict
        """Validate every Service and EndpointSlice with kubernetes-validate (slow)."""
        self.routes: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[str, dict[str, Any]] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self.grants: dict[str, list[dict[str, Any]]] = {}
        self.uid = pool_uid
        self.foreign = foreign or set()
        self.watched: tuple[tuple[str, str], int, str] | None = None
        """(route key, rule index, namespace) whose invariant is checked after each write."""
        self.violations: list[str] = []
        self.writes: list[str] = []
        self._versions = itertools.count(1)

    def put_route(self, body: Mapping[str, Any]) -> None:
        body = copy.deepcopy(dict(body))
        meta = body["metadata"]
        old = self.routes.get((meta["namespace"], meta["name"]))
        meta["resourceVersion"] = str(next(self._versions))
        meta["generation"] = (old["metadata"]["generation"] + 1) if old else 1
        self.routes[meta["namespace"], meta["name"]] = body

    async def pool_uid(self, *, pool: PoolKey) -> str:
        return self.uid

    async def get_route(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        found = self.routes.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def patch_route(
        self, *, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any]:
        current = self.routes[namespace, name]
        try:
            new = jsonpatch.apply_patch(current, [dict(op) for op in ops], in_place=False)
        except jsonpatch.JsonPatchTestFailed as exc:
            raise KubeConflict(str(exc), status=422) from exc
        validate_custom(new, crd_file=GATEWAY_API / "httproutes.yaml", version="v1")
        self.writes.append(f"route {namespace}/{name}")
        self.put_route(new)
        self._check()
        return copy.deepcopy(self.routes[namespace, name])

    async def reference_grants(self, *, namespace: str) -> Sequence[Mapping[str, Any]]:
        return copy.deepcopy(self.grants.get(namespace, []))

    async def list_owned(self, *, namespace: str, labels: Mapping[str, str]) -> OwnedObjects:
        def carries(obj: Mapping[str, Any]) -> bool:
            have = obj["metadata"].get("labels", {})
            return obj["metadata"]["namespace"] == namespace and all(
                have.get(k) == v for k, v in labels.items()
            )

        return OwnedObjects(
            services=[copy.deepcopy(s) for s in self.services.values() if carries(s)],
            slices=[copy.deepcopy(s) for s in self.slices.values() if carries(s)],
        )

    async def put(self, obj: Mapping[str, Any], *, labels: Mapping[str, str]) -> None:
        if self.strict:
            validate_core(obj)
        store = self.services if obj["kind"] == "Service" else self.slices
        name = obj["metadata"]["name"]
        existing = store.get(name)
        if existing is not None:
            have = existing["metadata"].get("labels", {})
            if any(have.get(k) != v for k, v in labels.items()):
                raise TargetSyncError(f"{name} is not ours", reason="ObjectNotOwned")
        body = copy.deepcopy(dict(obj))
        body["metadata"].setdefault("uid", str(uuid.uuid4()))
        store[name] = body
        self.writes.append(f"{obj['kind']} {name}")
        self._check()

    async def delete(
        self, *, kind: str, namespace: str, name: str, labels: Mapping[str, str]
    ) -> None:
        store = self.services if kind == "Service" else self.slices
        existing = store.get(name)
        if existing is None:
            return
        have = existing["metadata"].get("labels", {})
        if all(have.get(k) == v for k, v in labels.items()):
            del store[name]
            self.writes.append(f"delete {kind} {name}")
            self._check()

    def _check(self) -> None:
        if self.watched is None:
            return
        key, index, namespace = self.watched
        found = self.routes.get(key)
        if found is None:
            return
        problems = serving_problems(
            route=found,
            index=index,
            services=self.services,
            slices=self.slices,
            namespace=namespace,
            foreign=self.foreign,
        )
        self.violations += [f"after {self.writes[-1]}: {p}" for p in problems]
