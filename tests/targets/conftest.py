"""Fixtures for the target tests: pools, decisions, and a live xDS server with a gRPC client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from envoy.service.discovery.v3 import ads_pb2_grpc

from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import XdsServer
from trimtab.targets.xds.snapshots import PoolResources, build_pool_resources

POOL = PoolKey("serving", "llama")


def make_spec(**overrides: Any) -> InferencePoolSpec:
    raw: dict[str, Any] = {
        "endpoints": [{"name": "a", "address": "10.0.0.1", "port": 8000}],
        "targets": [{"envoy": {"cluster": "llama"}}],
    }
    raw.update(overrides)
    return InferencePoolSpec.model_validate(raw)


def make_decision(weights: dict[str, int], caps: dict[str, int] | None = None) -> Decision:
    caps = caps or {}
    return Decision(
        pods=tuple(
            PodDecision(PodName(n), w, caps.get(n, 8), PodState.SERVING, "test")
            for n, w in weights.items()
        )
    )


def make_endpoints(names: list[str]) -> dict[PodName, Endpoint]:
    return {
        PodName(n): Endpoint(PodName(n), f"10.0.0.{i + 1}", 8000)
        for i, n in enumerate(sorted(names))
    }


def make_resources(
    weights: dict[str, int], *, cluster: str = "llama", pool: PoolKey = POOL, **spec: Any
) -> PoolResources:
    return build_pool_resources(
        pool=pool,
        cluster=cluster,
        spec=make_spec(**spec),
        decision=make_decision(weights),
        endpoints=make_endpoints(list(weights)),
    )


class Factory:
    """The helpers above, handed to tests as the ``make`` fixture."""

    pool = POOL
    spec = staticmethod(make_spec)
    decision = staticmethod(make_decision)
    endpoints = staticmethod(make_endpoints)
    resources = staticmethod(make_resources)


@pytest.fixture
def make() -> Factory:
    return Factory()


@pytest.fixture
def cache() -> SnapshotCache:
    return SnapshotCache()


@pytest.fixture
async def xds_port(cache: SnapshotCache) -> AsyncIterator[int]:
    server = XdsServer(cache=cache)
    port = await server.start(host="127.0.0.1", port=0)
    yield port
    await server.stop(grace=0)


@pytest.fixture
async def open_stream(xds_port: int) -> AsyncIterator[Callable[[], Any]]:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{xds_port}")
    stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
    calls: list[Any] = []

    def opener() -> Any:
        call = stub.StreamAggregatedResources(timeout=30)
        calls.append(call)
        return call

    yield opener
    for call in calls:
        call.cancel()
    await channel.close(grace=None)
