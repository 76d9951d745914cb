"""The Kubernetes objects of the gatewayAPI target, as plain JSON-ready dicts.

Per tier: a selector-less Service (so no Kubernetes controller writes its endpoints) and one
EndpointSlice per address family and 1,000 endpoints, labelled
``endpointslice.kubernetes.io/managed-by: trimtab.io`` so the EndpointSlice controller leaves
it alone. Every object carries the pool's labels and an ownerReference to the pool, so
Kubernetes' garbage collector deletes it with the pool even when trimtab is not running. And
the rule's ``backendRefs``: one per tier, ``weight`` = the tier's weight.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trimtab.api.records import Endpoint, PodName, PoolKey
from trimtab.api.resource import API_VERSION, KIND
from trimtab.api.spec import AppProtocol, GatewayAPITarget

__all__ = [
    "MANAGED_BY",
    "POOL_LABEL",
    "TARGET_LABEL",
    "TIER_LABEL",
    "Owner",
    "RuleRef",
    "TierNames",
    "backend_refs",
    "endpoint_slices",
    "owned_labels",
    "service",
]

POOL_LABEL = "trimtab.io/pool"
TARGET_LABEL = "trimtab.io/target"
TIER_LABEL = "trimtab.io/tier"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
SLICE_MANAGER_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGED_BY = "trimtab.io"
PORT_NAME = "http"
SLICE_CAPACITY = 1000
"""``endpoints`` maxItems of an EndpointSlice."""
_NAME_LIMIT = 63


@dataclass(frozen=True)
class Owner:
    """The trimtab InferencePool that owns the tier objects (ownerReferences need its uid)."""

    name: str
    uid: str

    def reference(self) -> dict[str, Any]:
        # No blockOwnerDeletion: setting it needs update on inferencepools/finalizers.
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
        }


@dataclass(frozen=True)
class RuleRef:
    """Which rule of which route a target writes; ``key`` names it in labels and annotations."""

    namespace: str
    route: str
    rule_name: str | None
    rule_index: int

    @classmethod
    def of(cls, *, pool: PoolKey, spec: GatewayAPITarget) -> RuleRef:
        return cls(
            namespace=spec.http_route.namespace or pool.namespace,
            route=spec.http_route.name,
            rule_name=spec.rule_name,
            rule_index=spec.rule_index or 0,
        )

    @property
    def text(self) -> str:
        rule = f"rule {self.rule_name}" if self.rule_name else f"rule #{self.rule_index}"
        return f"HTTPRoute {self.namespace}/{self.route} {rule}"

    @property
    def key(self) -> str:
        """8 hex digits identifying route and rule (label-safe)."""
        rule = f"name={self.rule_name}" if self.rule_name else f"index={self.rule_index}"
        return _digest(f"{self.namespace}/{self.route}/{rule}")


@dataclass(frozen=True)
class TierNames:
    """Names of one target's tier objects: ``<pool>-<key>-<slot>`` cut to a DNS label."""

    pool: PoolKey
    rule: RuleRef

    def service(self, slot: int) -> str:
        suffix = f"-{self.rule.key[:6]}-{slot}"
        stem = re.sub(r"[^a-z0-9-]", "-", self.pool.name)[: _NAME_LIMIT - len(suffix) - 1]
        stem = stem.rstrip("-")
        if not stem or not stem[0].isalpha():
            stem = f"p{stem}"[: _NAME_LIMIT - len(suffix)].rstrip("-")
        return f"{stem}{suffix}"

    def slot_of(self, service: str) -> int | None:
        for slot in range(16):
            if self.service(slot) == service:
                return slot
        return None


def owned_labels(*, pool: PoolKey, rule: RuleRef) -> dict[str, str]:
    """The labels that mark an object as this target's (the writer checks them)."""
    return {POOL_LABEL: label_value(pool.name), TARGET_LABEL: rule.key}


def label_value(name: str) -> str:
    """A pool name as a label value (<= 63 characters; longer names keep a hash)."""
    if len(name) <= _NAME_LIMIT:
        return name
    return f"{name[: _NAME_LIMIT - 9].rstrip('.-_')}-{_digest(name)}"


def service(
    *,
    pool: PoolKey,
    rule: RuleRef,
    owner: Owner,
    name: str,
    slot: int,
    port: int,
    app_protocol: AppProtocol,
) -> dict[str, Any]:
    labels = {**owned_labels(pool=pool, rule=rule), TIER_LABEL: str(slot)}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name=name, pool=pool, owner=owner, labels=labels),
        "spec": {
            "type": "ClusterIP",
            "ports": [{**_port(port=port, app_protocol=app_protocol), "targetPort": port}],
        },
    }


def endpoint_slices(
    *,
    pool: PoolKey,
    rule: RuleRef,
    owner: Owner,
    service_name: str,
    slot: int,
    endpoints: Sequence[Endpoint],
    pods: bool,
    app_protocol: AppProtocol,
) -> list[dict[str, Any]]:
    """The EndpointSlices of one tier, named ``<service>-<family>-<n>``, one per address
    family and port (an EndpointSlice's ports apply to all its endpoints) and 1,000 endpoints.

    ``pods``: the endpoints are pods of the pool's namespace (a ``targetRef`` names each);
    static endpoints have none. Hostnames cannot go into an IP EndpointSlice: ValueError.
    """
    groups: dict[tuple[str, int], list[Endpoint]] = {}
    for endpoint in sorted(endpoints, key=lambda e: (e.address, e.port, e.name)):
        groups.setdefault((_family(endpoint.address), endpoint.port), []).append(endpoint)
    labels = {
        **owned_labels(pool=pool, rule=rule),
        TIER_LABEL: str(slot),
        SERVICE_NAME_LABEL: service_name,
        SLICE_MANAGER_LABEL: MANAGED_BY,
    }
    slices: list[dict[str, Any]] = []
    for (family, port), members in sorted(groups.items()):
        for chunk in range(0, len(members), SLICE_CAPACITY):
            name = f"{service_name}-{family.lower()}-{len(slices)}"
            slices.append(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": _metadata(name=name, pool=pool, owner=owner, labels=labels),
                    "addressType": family,
                    "endpoints": [
                        _endpoint(e, namespace=pool.namespace, pod=pods)
                        for e in members[chunk : chunk + SLICE_CAPACITY]
                    ],
                    "ports": [_port(port=port, app_protocol=app_protocol)],
                }
            )
    return slices


def backend_refs(
    *, weights: Mapping[str, int], port: int, namespace: str | None
) -> list[dict[str, Any]]:
    """The rule's backendRefs; ``namespace`` only when the route lives elsewhere."""
    refs = []
    for name, weight in weights.items():
        ref: dict[str, Any] = {"group": "", "kind": "Service", "name": name}
        if namespace is not None:
            ref["namespace"] = namespace
        ref["port"] = port
        ref["weight"] = weight
        refs.append(ref)
    return refs


def endpoint_key(endpoint: Endpoint) -> str:
    return f"{endpoint.address}:{endpoint.port}"


def _metadata(
    *, name: str, pool: PoolKey, owner: Owner, labels: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": pool.namespace,
        "labels": {**labels, "app.kubernetes.io/managed-by": "trimtab"},
        "ownerReferences": [owner.reference()],
    }


def _port(*, port: int, app_protocol: AppProtocol) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": PORT_NAME, "port": port, "protocol": "TCP"}
    if app_protocol is AppProtocol.H2C:
        entry["appProtocol"] = "kubernetes.io/h2c"
    return entry


def _endpoint(endpoint: Endpoint, *, namespace: str, pod: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "addresses": [endpoint.address],
        "conditions": {"ready": True, "serving": True, "terminating": False},
    }
    if pod:
        entry["targetRef"] = {"kind": "Pod", "name": PodName(endpoint.name), "namespace": namespace}
    return entry


def _family(address: str) -> str:
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(
            f"endpoint {address} is a hostname; Gateway API backends need IP addresses"
        ) from None
    return "IPv4" if parsed.version == 4 else "IPv6"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]
