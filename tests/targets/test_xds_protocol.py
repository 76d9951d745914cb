"""The ADS server's protocol, driven by a real grpc.aio client playing Envoy.

Covered: the ready gate holds every response; ACKs make a cluster Synced; a NACK is reported
with Envoy's message and its version is not sent again until the snapshot changes; stale nonces
are ignored; an EDS re-request with an acknowledged nonce is answered again; EDS pushes carry
only changed assignments; two clients get the same versions. Not covered: Delta xDS (not served).
"""

from __future__ import annotations

import asyncio

from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.rpc import status_pb2

from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.snapshots import CLUSTER_TYPE, ENDPOINT_TYPE


def _request(type_url, *, names=(), version="", nonce="", error=None):
    request = discovery_pb2.DiscoveryRequest(
        node=base_pb2.Node(id="test-envoy"),
        type_url=type_url,
        resource_names=list(names),
        version_info=version,
        response_nonce=nonce,
    )
    if error is not None:
        request.error_detail.CopyFrom(status_pb2.Status(code=3, message=error))
    return request


async def _read(call):
    return await asyncio.wait_for(call.read(), timeout=5)


async def _until(predicate):
    for _ in range(500):  # bounded: the server handles each request in well under a second
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition never became true")


async def _subscribe_eds(call, names=("llama",)):
    await call.write(_request(ENDPOINT_TYPE, names=names))
    return await _read(call)


async def test_ready_gate_holds_responses_until_open(cache, open_stream, make):
    call = open_stream()
    await call.write(_request(CLUSTER_TYPE))
    await _until(lambda: cache.acks.streams())
    cache.set_pool(make.resources({"a": 1, "b": 5}))
    cache.open()
    response = await _read(call)
    # The first response of the stream carries the restored decision, not a default one.
    assert response.nonce.endswith("-1")
    assert response.version_info == cache.current().versions[CLUSTER_TYPE]


async def test_ack_makes_the_cluster_synced(cache, open_stream, make):
    target = EnvoyXdsTarget(cache=cache, cluster="llama")
    cache.set_pool(make.resources({"a": 1}))
    cache.open()
    call = open_stream()
    await call.write(_request(CLUSTER_TYPE))
    cds = await _read(call)
    await call.write(_request(CLUSTER_TYPE, version=cds.version_info, nonce=cds.nonce))
    eds = await _subscribe_eds(call)
    assert target.state(pool=make.pool).reason == "AwaitingAck"
    await call.write(
        _request(ENDPOINT_TYPE, names=["llama"], version=eds.version_info, nonce=eds.nonce)
    )
    await _until(lambda: target.state(pool=make.pool).synced)


async def test_nack_is_reported_and_not_resent(cache, open_stream, make):
    target = EnvoyXdsTarget(cache=cache, cluster="llama")
    cache.set_pool(make.resources({"a": 1}))
    cache.open()
    call = open_stream()
    await call.write(_request(CLUSTER_TYPE))
    cds = await _read(call)
    await call.write(_request(CLUSTER_TYPE, nonce=cds.nonce, error="bad cluster: choice_count"))
    await _until(lambda: target.state(pool=make.pool).reason == "EnvoyNack")
    assert "bad cluster: choice_count" in target.state(pool=make.pool).message
    # The next response is the changed snapshot, not the rejected version again.
    cache.set_pool(make.resources({"a": 1}, policy={"maxPendingRequests": 5}))
    response = await _read(call)
    assert response.version_info != cds.version_info


async def test_stale_nonce_is_ignored(cache, open_stream, make):
    cache.set_pool(make.resources({"a": 1}))
    cache.open()
    call = open_stream()
    first = await _subscribe_eds(call)
    await call.write(_request(ENDPOINT_TYPE, names=["llama"], nonce="not-a-nonce-we-sent"))
    await call.write(_request(ENDPOINT_TYPE, names=["llama"], nonce=first.nonce))
    cache.set_pool(make.resources({"a": 2}))
    response = await _read(call)
    assert response.version_info == cache.current().versions[ENDPOINT_TYPE]


async def test_eds_rerequest_with_acked_nonce_is_answered(cache, open_stream, make):
    cache.set_pool(make.resources({"a": 1}))
    cache.open()
    call = open_stream()
    eds = await _subscribe_eds(call)
    ack = _request(ENDPOINT_TYPE, names=["llama"], version=eds.version_info, nonce=eds.nonce)
    await call.write(ack)
    await call.write(ack)  # what Envoy sends after a cluster change
    again = await _read(call)
    assert again.version_info == eds.version_info
    assert [r.type_url for r in again.resources] == [ENDPOINT_TYPE]


async def test_eds_push_carries_only_changed_assignments(cache, open_stream, make):
    cache.set_pool(make.resources({"a": 1}, cluster="x"))
    cache.set_pool(make.resources({"a": 1}, cluster="y"))
    cache.open()
    call = open_stream()
    eds = await _subscribe_eds(call, names=("x", "y"))
    assert len(eds.resources) == 2
    await call.write(
        _request(ENDPOINT_TYPE, names=["x", "y"], version=eds.version_info, nonce=eds.nonce)
    )
    await _until(lambda: cache.acks.streams()[0].types[ENDPOINT_TYPE].acked)
    cache.set_pool(make.resources({"a": 7}, cluster="y"))
    push = await _read(call)
    assert len(push.resources) == 1


async def test_every_client_gets_the_same_versions(cache, open_stream, make):
    cache.set_pool(make.resources({"a": 1, "b": 2}))
    cache.open()
    calls = [open_stream(), open_stream()]
    for call in calls:
        await call.write(_request(CLUSTER_TYPE))
    versions = {(await _read(call)).version_info for call in calls}
    assert versions == {cache.current().versions[CLUSTER_TYPE]}
    assert len(cache.acks.streams()) == 2
