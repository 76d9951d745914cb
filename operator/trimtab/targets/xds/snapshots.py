"""Immutable, validated, content-hashed snapshots of what the xDS server serves.

:func:`build_pool_resources` turns one pool's decision into its Cluster and
ClusterLoadAssignment, serialized once (deterministically) and hashed; :func:`build_snapshot`
combines every pool into a :class:`Snapshot` whose per-type version is a hash of the
resources' hashes, so an unchanged decision yields the same version and pushes nothing. Both
are pure: no I/O, no clock, and the result holds only bytes and strings.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import XdsConflict
from trimtab.targets.xds.resources import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    build_cluster,
    build_load_assignment,
)

__all__ = [
    "CLUSTER_TYPE",
    "ENDPOINT_TYPE",
    "PoolResources",
    "Resource",
    "Snapshot",
    "build_pool_resources",
    "build_snapshot",
]

TYPE_URLS = (CLUSTER_TYPE, ENDPOINT_TYPE)
"""Served types, in the order a change is pushed: clusters before their endpoints."""


@dataclass(frozen=True)
class Resource:
    """One serialized xDS resource."""

    name: str
    type_url: str
    payload: bytes
    """Deterministic protobuf serialization, ready to wrap in a ``google.protobuf.Any``."""
    digest: str
    response_field: bytes
    """This resource as one entry of ``DiscoveryResponse.resources``, already encoded.

    Protobuf messages concatenate, so a response is its header fields followed by these
    bytes: every stream shares one encoding of the snapshot instead of building its own.
    """


@dataclass(frozen=True)
class PoolResources:
    """A pool's cluster and endpoints, as served for one Envoy cluster name."""

    pool: PoolKey
    cluster: Resource
    load_assignment: Resource

    @property
    def name(self) -> str:
        return self.cluster.name

    def of_type(self, type_url: str) -> Resource:
        return self.cluster if type_url == CLUSTER_TYPE else self.load_assignment


@dataclass(frozen=True)
class Snapshot:
    """Every served pool, keyed by cluster name, with one version per resource type."""

    pools: Mapping[str, PoolResources]
    versions: Mapping[str, str]

    def resources(self, type_url: str, names: Collection[str]) -> tuple[Resource, ...]:
        """Resources of ``type_url``; all of them when ``names`` is empty (a wildcard)."""
        chosen = sorted(self.pools) if not names else sorted(n for n in names if n in self.pools)
        return tuple(self.pools[name].of_type(type_url) for name in chosen)


def build_pool_resources(
    *,
    pool: PoolKey,
    cluster: str,
    spec: InferencePoolSpec,
    decision: Decision,
    endpoints: Mapping[PodName, Endpoint],
) -> PoolResources:
    """Validate and serialize ``decision`` for ``cluster``; raise :class:`XdsSnapshotInvalid`."""
    load_assignment = build_load_assignment(cluster=cluster, decision=decision, endpoints=endpoints)
    cluster_proto = build_cluster(
        name=cluster,
        policy=spec.policy,
        retry=spec.retry,
        app_protocol=spec.app_protocol,
        max_in_flight=max(pod.max_in_flight for pod in decision.pods),
    )
    return PoolResources(
        pool=pool,
        cluster=_resource(cluster, CLUSTER_TYPE, cluster_proto),
        load_assignment=_resource(cluster, ENDPOINT_TYPE, load_assignment),
    )


def build_snapshot(pools: Iterable[PoolResources]) -> Snapshot:
    """Combine pools; raise :class:`XdsConflict` if two pools claim one cluster name."""
    by_name: dict[str, PoolResources] = {}
    for resources in pools:
        other = by_name.get(resources.name)
        if other is not None and other.pool != resources.pool:
            raise XdsConflict(
                f"cluster {resources.name} is claimed by pools {other.pool} and {resources.pool}"
            )
        by_name[resources.name] = resources
    versions = {
        type_url: _version(by_name[name].of_type(type_url) for name in sorted(by_name))
        for type_url in TYPE_URLS
    }
    return Snapshot(pools=MappingProxyType(by_name), versions=MappingProxyType(versions))


def _resource(name: str, type_url: str, message: Any) -> Resource:
    payload: bytes = message.SerializeToString(deterministic=True)
    wrapped = discovery_pb2.DiscoveryResponse(
        resources=[any_pb2.Any(type_url=type_url, value=payload)]
    )
    return Resource(
        name=name,
        type_url=type_url,
        payload=payload,
        digest=hashlib.blake2b(payload, digest_size=16).hexdigest(),
        response_field=wrapped.SerializeToString(deterministic=True),
    )


def _version(resources: Iterable[Resource]) -> str:
    hasher = hashlib.blake2b(digest_size=8)
    for resource in resources:
        hasher.update(f"{resource.name}={resource.digest};".encode())
    return hasher.hexdigest()
