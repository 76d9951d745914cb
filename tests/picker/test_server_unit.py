"""The picker's gRPC services without Envoy: a grpc.aio client plays Envoy's ext_proc side.

Covered: protocol parsing (subset hint forms, served endpoint, token estimate), a grant's
header and metadata carry the same value, the slot is held until the stream ends and released
once on half-close and on cancel, a queued stream is granted when a slot frees, pool naming by
gRPC metadata, request header or the single pool, and the health services.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from trimtab.admission import Admission, AdmissionSettings, PodCapacity
from trimtab.api.records import PodName
from trimtab.picker import PickerPools, protocol, serve_picker


def _metadata(namespace: str, values: dict[str, Any]) -> Any:
    struct = struct_pb2.Struct()
    struct.update(values)
    return base_pb2.Metadata(filter_metadata={namespace: struct})


def _headers(**values: str) -> Any:
    return ext_proc.HttpHeaders(
        headers=base_pb2.HeaderMap(
            headers=[
                base_pb2.HeaderValue(key=k.replace("_", "-"), raw_value=v.encode())
                for k, v in values.items()
            ]
        )
    )


def test_subset_hint_forms():
    key = protocol.SUBSET_KEY
    assert protocol.subset_hint(base_pb2.Metadata()) is None
    as_list = _metadata(protocol.SUBSET_NAMESPACE, {key: ["10.0.0.1:80", "10.0.0.2:80"]})
    assert protocol.subset_hint(as_list) == ("10.0.0.1:80", "10.0.0.2:80")
    as_text = _metadata(protocol.SUBSET_NAMESPACE, {key: "10.0.0.1:80, 10.0.0.3"})
    assert protocol.subset_hint(as_text) == ("10.0.0.1:80", "10.0.0.3")
    assert protocol.subset_hint(_metadata(protocol.SUBSET_NAMESPACE, {key: []})) == ()
    allowed = protocol.expand_subset(
        ("10.0.0.1:80", "10.0.0.3"), ["10.0.0.1:80", "10.0.0.1:81", "10.0.0.3:9"]
    )
    assert allowed == {"10.0.0.1:80", "10.0.0.3:9"}


def test_served_endpoint_prefers_metadata():
    meta = _metadata("envoy.lb", {protocol.SERVED_KEY: "10.0.0.9:80"})
    header = _headers(x_gateway_destination_endpoint_served="10.0.0.8:80")
    assert protocol.served_endpoint(meta, header) == "10.0.0.9:80"
    assert protocol.served_endpoint(base_pb2.Metadata(), header) == "10.0.0.8:80"
    assert protocol.served_endpoint(base_pb2.Metadata(), _headers()) is None


def test_destination_header_and_metadata_agree():
    response = protocol.destination(address="10.0.0.1:80", fallbacks=("10.0.0.2:80",))
    header = response.request_headers.response.header_mutation.set_headers[0].header
    assert header.key == "x-gateway-destination-endpoint"
    assert header.raw_value == b"10.0.0.1:80,10.0.0.2:80"
    lb = response.dynamic_metadata.fields["envoy.lb"].struct_value
    assert lb.fields["x-gateway-destination-endpoint"].string_value == "10.0.0.1:80,10.0.0.2:80"


def test_retry_after_rounds_up():
    response = protocol.immediate(status=429, reason="queue_full", retry_after_s=0.2)
    assert response.immediate_response.status.code == 429
    sent = {
        h.header.key: h.header.raw_value for h in response.immediate_response.headers.set_headers
    }
    assert sent["retry-after"] == b"1"


class Recording(Admission):
    def __init__(self, *, settings: AdmissionSettings) -> None:
        super().__init__(settings=settings)
        self.asks: list[Any] = []
        self.releases: Counter[str] = Counter()

    def ask(self, **kwargs: Any) -> Any:
        self.asks.append(kwargs["ask"])
        return super().ask(**kwargs)

    def release(self, **kwargs: Any) -> Any:
        self.releases[kwargs["id"]] += 1
        return super().release(**kwargs)


@pytest.fixture
async def picker():
    made: list[Recording] = []

    def factory(settings: AdmissionSettings) -> Admission:
        made.append(Recording(settings=settings))
        return made[-1]

    pools = PickerPools(factory=factory)
    async with serve_picker(
        host="127.0.0.1", port=0, pools=pools, ready=True, registry=CollectorRegistry()
    ) as server:
        pools.update(
            pool="llama",
            pods=[PodCapacity(name=PodName("a"), address="10.0.0.1:80", cap=1)],
            settings=AdmissionSettings(bytes_per_token=4.0),
            now=time.monotonic(),
        )
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            yield server, made, channel


async def _open(channel: Any, *, pool: str | None = "llama", **headers: str) -> Any:
    stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
    metadata = () if pool is None else ((protocol.POOL_HEADER, pool),)
    call = stub.Process(metadata=metadata)
    await call.write(ext_proc.ProcessingRequest(request_headers=_headers(**headers)))
    return call


async def _settle(predicate: Any) -> None:
    for _ in range(300):  # bounded: the server handles a message within milliseconds
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never settled")


async def test_grant_is_held_until_half_close(picker):
    server, made, channel = picker
    call = await _open(channel, content_length="400")
    answer = await call.read()
    assert (
        answer.request_headers.response.header_mutation.set_headers[0].header.raw_value
        == b"10.0.0.1:80"
    )
    assert made[0].asks[0].prompt_tokens == 100
    await call.write(ext_proc.ProcessingRequest(response_headers=_headers()))
    assert (await call.read()).HasField("response_headers")
    assert server.pools.get("llama").stats().pods[0].in_flight == 1
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    await _settle(lambda: server.pools.get("llama").stats().pods[0].in_flight == 0)
    assert dict(made[0].releases) == {"1": 1}


async def test_queued_stream_is_granted_when_a_slot_frees_and_cancel_releases(picker):
    server, made, channel = picker
    first = await _open(channel, x_trimtab_prompt_tokens="7")
    await first.read()
    assert made[0].asks[0].prompt_tokens == 7
    second = await _open(channel)
    await _settle(lambda: server.pools.get("llama").stats().queue_length == 1)
    first.cancel()
    answer = await second.read()
    assert answer.HasField("request_headers")
    second.cancel()
    await _settle(lambda: server.pools.get("llama").stats().pods[0].in_flight == 0)
    assert dict(made[0].releases) == {"1": 1, "2": 1}


async def test_pool_by_header_or_single_pool(picker):
    server, _, channel = picker
    by_header = await _open(channel, pool=None, x_trimtab_pool="llama")
    assert (await by_header.read()).HasField("request_headers")
    by_header.cancel()
    await _settle(lambda: server.pools.get("llama").stats().pods[0].in_flight == 0)
    alone = await _open(channel, pool=None)
    assert (await alone.read()).request_headers.response.HasField("header_mutation")
    alone.cancel()
    unknown = await _open(channel, pool="other")
    passthrough = await unknown.read()
    assert not passthrough.request_headers.response.HasField("header_mutation")
    unknown.cancel()


async def test_health_services(picker):
    server, _, channel = picker
    stub = health_pb2_grpc.HealthStub(channel)

    async def status(service: str) -> int:
        reply = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        return reply.status

    serving = health_pb2.HealthCheckResponse.SERVING
    for service in ("liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"):
        assert await status(service) == serving
    await server.set_ready(False)
    assert await status("readiness") == health_pb2.HealthCheckResponse.NOT_SERVING
    assert (
        await status("envoy.service.ext_proc.v3.ExternalProcessor")
        == health_pb2.HealthCheckResponse.NOT_SERVING
    )
    assert await status("liveness") == serving
