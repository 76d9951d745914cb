"""The xDS server against clients that are not a well-behaved Envoy.

Covered: mTLS (a client certificate from the configured CA is accepted; none, or one from
another CA, is refused), the node-id pattern (PERMISSION_DENIED), the stream limit
(RESOURCE_EXHAUSTED), requests over the size limit, a NACK with control characters and 10 kB
of text (status and log bounded and clean), a node id that would forge log lines, and a
client that never ACKs (named as silent after the timeout, does not hold the condition).
"""

from __future__ import annotations

import asyncio
import logging
import re

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2

from support.certs import make_authority
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.acks import NACK_TEXT_LIMIT, AckLedger
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import ServerTls, XdsLimits, XdsSecurity, XdsServer
from trimtab.targets.xds.snapshots import CLUSTER_TYPE, ENDPOINT_TYPE

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def _request(type_url, *, node="test-envoy", names=(), nonce="", error=None):
    request = discovery_pb2.DiscoveryRequest(
        node=base_pb2.Node(id=node), type_url=type_url, resource_names=list(names)
    )
    request.response_nonce = nonce
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


class _Server:
    """One XdsServer on 127.0.0.1 serving pool ``llama``, and the channels opened to it."""

    def __init__(self, cache, server, port):
        self.cache, self.server, self.port = cache, server, port
        self.channels = []

    def stub(self, credentials=None, options=()):
        address = f"127.0.0.1:{self.port}"
        channel = (
            grpc.aio.secure_channel(address, credentials, options=options)
            if credentials is not None
            else grpc.aio.insecure_channel(address, options=options)
        )
        self.channels.append(channel)
        return ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)

    def open(self, credentials=None):
        return self.stub(credentials).StreamAggregatedResources(timeout=20)


@pytest.fixture
async def serve(make):
    started = []

    async def start(*, security=None, limits=None, ledger=None):
        cache = SnapshotCache(acks=ledger)
        cache.set_pool(make.resources({"a": 1, "b": 5}))
        cache.open()
        server = XdsServer(
            cache=cache, security=security or XdsSecurity(), limits=limits or XdsLimits()
        )
        port = await server.start(host="127.0.0.1", port=0)
        started.append(_Server(cache, server, port))
        return started[-1]

    yield start
    for running in started:
        for channel in running.channels:
            await channel.close(grace=None)
        await running.server.stop(grace=0)


async def _status_code(call):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _read(call)
    return caught.value.code()


async def test_mtls_accepts_a_client_of_the_ca_and_refuses_others(serve, tmp_path):
    ca = make_authority(tmp_path / "ca")
    server_leaf = ca.issue("trimtab", server=True)
    client_leaf = ca.issue("envoy", server=False)
    stranger = make_authority(tmp_path / "other", name="other-ca").issue("envoy", server=False)
    tls = ServerTls(cert=server_leaf.cert, key=server_leaf.key, client_ca=ca.cert)
    running = await serve(security=XdsSecurity(tls=tls))

    def credentials(leaf=None):
        return grpc.ssl_channel_credentials(
            root_certificates=ca.cert.read_bytes(),
            private_key=leaf.key.read_bytes() if leaf else None,
            certificate_chain=leaf.cert.read_bytes() if leaf else None,
        )

    good = running.open(credentials(client_leaf))
    await good.write(_request(CLUSTER_TYPE))
    assert (await _read(good)).type_url == CLUSTER_TYPE

    for refused in (credentials(None), credentials(stranger)):
        call = running.open(refused)
        with pytest.raises(grpc.aio.AioRpcError):  # the handshake fails: no stream exists
            await call.write(_request(CLUSTER_TYPE))
            await _read(call)
    plaintext = running.open()
    with pytest.raises(grpc.aio.AioRpcError):
        await plaintext.write(_request(CLUSTER_TYPE))
        await _read(plaintext)
    assert {s.node for s in running.cache.acks.streams()} == {"test-envoy"}


async def test_node_id_pattern_refuses_other_nodes(serve, caplog):
    running = await serve(security=XdsSecurity(node_id_pattern=r"gateway-[a-z0-9-]+"))
    allowed = running.open()
    await allowed.write(_request(CLUSTER_TYPE, node="gateway-a1"))
    assert (await _read(allowed)).type_url == CLUSTER_TYPE

    caplog.set_level(logging.WARNING, logger="trimtab.xds")
    for node in ("rogue", "gateway-a1\nforged line", ""):
        refused = running.open()
        await refused.write(_request(CLUSTER_TYPE, node=node))
        assert await _status_code(refused) is grpc.StatusCode.PERMISSION_DENIED
    assert [s.node for s in running.cache.acks.streams()] == ["gateway-a1"]
    assert not any("\n" in r.getMessage() for r in caplog.records)


async def test_streams_beyond_the_limit_are_refused(serve):
    running = await serve(limits=XdsLimits(max_streams=2))
    calls = [running.open() for _ in range(2)]
    for index, call in enumerate(calls):
        await call.write(_request(CLUSTER_TYPE, node=f"envoy-{index}"))
        await _read(call)
    extra = running.open()
    await extra.write(_request(CLUSTER_TYPE, node="one-too-many"))
    assert await _status_code(extra) is grpc.StatusCode.RESOURCE_EXHAUSTED
    # The limit counts open streams: closing one makes room again.
    calls[0].cancel()
    await _until(lambda: len(running.cache.acks.streams()) == 1)
    again = running.open()
    await again.write(_request(CLUSTER_TYPE, node="envoy-again"))
    assert (await _read(again)).type_url == CLUSTER_TYPE


async def test_requests_over_the_size_limit_end_the_stream(serve):
    running = await serve(limits=XdsLimits(max_request_bytes=64 * 1024))
    call = running.open()
    names = [f"cluster-{i:06d}" for i in range(10_000)]  # ~150 kB of resource names
    await call.write(_request(ENDPOINT_TYPE, names=names))
    assert await _status_code(call) is grpc.StatusCode.RESOURCE_EXHAUSTED


async def test_rogue_nack_text_is_bounded_and_clean(serve, make, caplog):
    running = await serve()
    target = EnvoyXdsTarget(cache=running.cache, cluster="llama")
    call = running.open()
    await call.write(_request(CLUSTER_TYPE, node="evil\r\nnode\x1b[31m" + "n" * 500))
    first = await _read(call)
    caplog.set_level(logging.INFO, logger="trimtab.xds")
    text = "bad\n[ERROR] forged\x00\x07\x1b[2J\u2028" + "x" * 10_000
    await call.write(_request(CLUSTER_TYPE, nonce=first.nonce, error=text))
    await _until(lambda: target.state(pool=make.pool).reason == "EnvoyNack")
    state = target.state(pool=make.pool)
    assert len(state.message) <= NACK_TEXT_LIMIT + 130
    assert not _CONTROL.search(state.message)
    assert "forged" in state.message  # cleaned, not dropped
    logged = [r.getMessage() for r in caplog.records]
    assert logged
    assert all(len(m) < 1024 and not _CONTROL.search(m) for m in logged)


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


async def test_a_client_that_never_acks_does_not_pin_the_condition(serve, make):
    clock = _Clock()
    running = await serve(ledger=AckLedger(silent_after_s=30.0, clock=clock))
    target = EnvoyXdsTarget(cache=running.cache, cluster="llama")

    silent = running.open()
    await silent.write(_request(CLUSTER_TYPE, node="never-acks"))
    await _read(silent)
    await silent.write(_request(ENDPOINT_TYPE, node="never-acks", names=["llama"]))
    await _read(silent)
    # Alone and within the timeout it is awaited; past it, reported as silent.
    assert target.state(pool=make.pool).reason == "AwaitingAck"
    clock.now += 31
    state = target.state(pool=make.pool)
    assert (state.synced, state.reason) == (False, "EnvoySilent")
    assert "never-acks" in state.message

    good = running.open()
    await good.write(_request(CLUSTER_TYPE, node="good-envoy"))
    cds = await _read(good)
    await good.write(_request(ENDPOINT_TYPE, node="good-envoy", names=["llama"]))
    eds = await _read(good)
    assert target.state(pool=make.pool).reason == "AwaitingAck"  # the new one is awaited
    await good.write(_request(CLUSTER_TYPE, node="good-envoy", nonce=cds.nonce))
    await good.write(_request(ENDPOINT_TYPE, node="good-envoy", names=["llama"], nonce=eds.nonce))
    await _until(lambda: target.state(pool=make.pool).synced)
    state = target.state(pool=make.pool)
    assert state.reason == "Synced"
    assert "acknowledged by 1 Envoy(s)" in state.message
    assert "never-acks silent" in state.message

    # A new decision: the good Envoy is awaited again, the silent one still not.
    running.cache.set_pool(make.resources({"a": 2, "b": 5}))
    await _read(good)
    assert target.state(pool=make.pool).reason == "AwaitingAck"
    clock.now += 31  # the good one did not answer either: both silent now
    assert target.state(pool=make.pool).reason == "EnvoySilent"
