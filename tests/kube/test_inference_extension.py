"""trimtab as the endpoint picker of GIE InferencePools: real kopf, KMock, real Envoy.

The emulator holds the real GIE CRD (``../shared/third_party``). A GIE ``InferencePool`` whose
``endpointPickerRef`` names trimtab's picker Service is served by the picker under
``<namespace>/infpool/<name>`` with its selector's pods, one endpoint per target port; settings come
from the trimtab pool its ``trimtab.io/policy`` annotation names; the GIE object is never
written. With real Envoy configured as a GIE gateway configures it (ext_proc per the EPP
protocol, override_host on the pool's endpoints), requests go through the picker with its caps,
and when the picker is down ``failureMode`` decides: FailClose answers 5xx, FailOpen is served.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import httpx
import kmock
import pytest
import pytest_asyncio
import yaml
from click.testing import CliRunner
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from google.protobuf import struct_pb2

from kube.conftest import FAST, NAMESPACE, eventually
from picker.conftest import SseUpstream
from support.emulators import free_port
from support.fakes import FakeMetrics, FakeSources, FakeTargets, RecordingTarget
from support.gatewayapi import GIE, crd, validate_custom
from support.kube import CRDS, VERBS, Cluster
from trimtab.api.spec import AdmissionMode, Engine, MetricsSource
from trimtab.api.validation import parse_spec
from trimtab.commands.envoy_bootstrap import envoy_bootstrap
from trimtab.kube.inference_extension import (
    FailureMode,
    PickerService,
    failure_mode,
    refers_to,
    trimtab_spec,
)
from trimtab.kube.running import OperatorConfig, run_operator
from trimtab.targets.bootstrap import picker_load_balancing
from trimtab_lab.envoy import EnvoyProcess

GIE_POOLS = "inference.networking.k8s.io/v1/inferencepools"
SERVICE = "trimtab-picker"
LABELS = {"app": "vllm"}


def teach(kube: Cluster) -> None:
    kube.kube.resources[GIE_POOLS] = kmock.ResourceInfo(
        kind="InferencePool",
        singular="inferencepool",
        namespaced=True,
        verbs=VERBS,
        shortnames={"infpool"},
        subresources={"status"},
    )
    body = crd(GIE / "inferencepools.yaml")
    kube.kube.objects[CRDS, None, body["metadata"]["name"]] = body


def gie_pool(
    *,
    name: str,
    port: int,
    picker_port: int,
    ports: tuple[int, ...] = (),
    labels: Mapping[str, str] = LABELS,
    service: str = SERVICE,
    failure_mode: str = "FailClose",
    policy: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if policy is not None:
        meta["annotations"] = {"trimtab.io/policy": policy}
    body = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": meta,
        "spec": {
            "selector": {"matchLabels": dict(labels)},
            "targetPorts": [{"number": p} for p in (port, *ports)],
            "endpointPickerRef": {
                "name": service,
                "port": {"number": picker_port},
                "failureMode": failure_mode,
            },
        },
    }
    validate_custom(body, crd_file=GIE / "inferencepools.yaml", version="v1")
    return body


async def create_gie(kube: Cluster, body: Mapping[str, Any]) -> None:
    url = f"/apis/inference.networking.k8s.io/v1/namespaces/{NAMESPACE}/inferencepools"
    async with kube.kube.post(url, json=dict(body)) as response:
        assert response.status < 400, await response.text()


def gie_object(kube: Cluster, name: str) -> dict[str, Any]:
    for (resource, ns, found), obj in kube.kube.objects.items():
        if resource == kmock.resource(GIE_POOLS) and (ns, found) == (NAMESPACE, name):
            return dict(obj.raw)
    raise AssertionError(f"no GIE InferencePool {name}")


def policy_spec(*, cap: int) -> dict[str, Any]:
    return {
        "selector": {"matchLabels": {"app": "unrelated"}},
        "metrics": {"interval": "200ms", "staleAfter": "5s"},
        "policy": {"maxInFlightPerPod": cap, "minInFlightPerPod": 1, "slowStart": "0s"},
        "admission": {"mode": "off", "queueTtl": "20s"},
        "targets": [{"envoy": {"cluster": "unrelated"}}],
    }


@contextlib.asynccontextmanager
async def operator(kube: Cluster, *, picker_port: int) -> AsyncIterator[None]:
    config = OperatorConfig(
        namespaces=[NAMESPACE],
        connection=kube.connection,
        loop=FAST,
        scanning=False,
        bind_address="127.0.0.1",
        picker_port=picker_port,
        picker_service=PickerService(name=SERVICE, port=picker_port),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_operator(
            config=config,
            stop=stop,
            sources=FakeSources(FakeMetrics()),
            targets=FakeTargets(RecordingTarget()),
        ),
        name="operator under test",
    )
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=20)


def _request(*, headers: Mapping[str, str], hint: list[str] | None = None) -> Any:
    metadata = base_pb2.Metadata()
    if hint is not None:
        struct = struct_pb2.Struct()
        struct.update({"x-gateway-destination-endpoint-subset": hint})
        metadata.filter_metadata["envoy.lb.subset_hint"].CopyFrom(struct)
    return ext_proc.ProcessingRequest(
        request_headers=ext_proc.HttpHeaders(
            headers=base_pb2.HeaderMap(
                headers=[
                    base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in headers.items()
                ]
            )
        ),
        metadata_context=metadata,
    )


async def pick(
    port: int, *, headers: Mapping[str, str] | None = None, hint: list[str] | None = None
) -> list[str]:
    """One ext_proc stream as a gateway opens it: the picked endpoints, [] for no pick."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
        call = stub.Process(iter([_request(headers=headers or {}, hint=hint)]))
        async for response in call:
            mutation = response.request_headers.response.header_mutation
            for option in mutation.set_headers:
                if option.header.key == "x-gateway-destination-endpoint":
                    value: bytes = option.header.raw_value
                    return value.decode().split(",")
            return []
    return []


def test_reference_policy_and_failure_mode_are_read_as_documented() -> None:
    service = PickerService.parse("trimtab-picker", default_port=9002)
    assert service == PickerService(name="trimtab-picker", port=9002)
    assert PickerService.parse("epp:9100", default_port=9002).port == 9100
    with pytest.raises(ValueError):
        PickerService.parse("epp:x", default_port=9002)
    body = gie_pool(name="llama", port=8000, ports=(8001,), picker_port=9002)
    spec = body["spec"]
    assert refers_to(gie_spec=spec, service=service)
    assert not refers_to(gie_spec=spec, service=PickerService(name="trimtab-picker", port=1))
    other_kind = {**spec, "endpointPickerRef": {**spec["endpointPickerRef"], "kind": "Pod"}}
    assert not refers_to(gie_spec=other_kind, service=service)
    assert failure_mode(spec) is FailureMode.FAIL_CLOSE
    unset = {**spec, "endpointPickerRef": {"name": "trimtab-picker", "port": {"number": 9002}}}
    assert failure_mode(unset) is FailureMode.FAIL_CLOSE  # the CRD's default
    # Defaults without a policy; with one, its settings but never its members or targets,
    # and admission is the picker's whatever the policy says.
    plain = parse_spec(trimtab_spec(gie_spec=spec, policy=None))
    assert plain.engine is Engine.VLLM and plain.metrics.source is MetricsSource.DIRECT
    assert plain.admission.mode is AdmissionMode.PICKER
    assert [p.number for p in plain.target_ports] == [8000, 8001]
    assert plain.selector is not None and plain.selector.match_labels == LABELS
    tuned = parse_spec(trimtab_spec(gie_spec=spec, policy={**policy_spec(cap=3), "engine": "tgi"}))
    assert tuned.engine is Engine.TGI and tuned.policy.max_in_flight_per_pod == 3
    assert tuned.admission.mode is AdmissionMode.PICKER
    assert tuned.selector is not None and tuned.selector.match_labels == LABELS


def test_envoy_bootstrap_failure_mode_sets_failure_mode_allow(tmp_path: Path) -> None:
    def ext_proc_allows(*args: str) -> bool:
        result = CliRunner().invoke(
            envoy_bootstrap, ["--cluster", "llama", "--picker", "127.0.0.1:9002", *args]
        )
        assert result.exit_code == 0, result.output
        config = yaml.safe_load(result.output)
        hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        (ext,) = [f for f in hcm["typed_config"]["http_filters"] if f["name"].endswith("ext_proc")]
        return bool(ext["typed_config"]["failure_mode_allow"])

    assert ext_proc_allows()
    assert ext_proc_allows("--picker-failure-mode", "FailOpen")
    assert not ext_proc_allows("--picker-failure-mode", "FailClose")


async def test_gie_pool_is_picked_with_its_pods_and_never_written(kube: Cluster) -> None:
    teach(kube)
    port = free_port(hosts=["127.0.0.1"])
    for index in (1, 2, 3):
        await kube.put_pod(
            namespace=NAMESPACE, name=f"vllm-{index}", labels=LABELS, ip=f"10.0.0.{index}"
        )
    await kube.put_pod(namespace=NAMESPACE, name="other", labels={"app": "x"}, ip="10.0.9.9")
    await kube.create_pool(namespace=NAMESPACE, name="llama-policy", spec=policy_spec(cap=3))
    await create_gie(
        kube, gie_pool(name="llama", port=8000, picker_port=port, policy="llama-policy")
    )
    # Names another picker: trimtab leaves it alone.
    await create_gie(
        kube, gie_pool(name="foreign", port=8000, picker_port=port, service="llm-d-epp")
    )
    before = {name: gie_object(kube, name) for name in ("llama", "foreign")}
    async with operator(kube, picker_port=port):
        # The only pool the picker knows: a gateway needs to name nothing.
        picked: list[str] = []
        for _ in range(300):  # bounded: the first tick comes within a few hundred ms
            picked = await pick(port)
            if picked:
                break
            await asyncio.sleep(0.05)
        assert sorted(picked) == ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
        # By name, as x-trimtab-pool; the trimtab policy pool itself is not admitted (mode off).
        named = await pick(port, headers={"x-trimtab-pool": f"{NAMESPACE}/infpool/llama"})
        assert sorted(named) == sorted(picked)
        assert await pick(port, headers={"x-trimtab-pool": f"{NAMESPACE}/infpool/foreign"}) == []
        found = await eventually(
            lambda: kube.events(namespace=NAMESPACE, reason="PolicyFound"), within=10
        )
        assert found[0]["involvedObject"]["apiVersion"] == "inference.networking.k8s.io/v1"
        assert found[0]["involvedObject"]["name"] == "llama"
        # A new member pod is picked on the next tick.
        await kube.put_pod(namespace=NAMESPACE, name="vllm-4", labels=LABELS, ip="10.0.0.4")
        for _ in range(300):
            picked = await pick(port)
            if "10.0.0.4:8000" in picked:
                break
            await asyncio.sleep(0.05)
        assert "10.0.0.4:8000" in picked
    # kopf only watched the GIE objects: no finalizer, annotation, status or spec change.
    for name, old in before.items():
        assert gie_object(kube, name) == old


async def test_several_gie_pools_named_by_header_or_subset_hint(kube: Cluster) -> None:
    teach(kube)
    port = free_port(hosts=["127.0.0.1"])
    await kube.put_pod(namespace=NAMESPACE, name="a-1", labels={"app": "a"}, ip="10.0.1.1")
    await kube.put_pod(namespace=NAMESPACE, name="b-1", labels={"app": "b"}, ip="10.0.2.1")
    # Pool b serves two ranks per pod (GIE: every podIP:port is an endpoint).
    await create_gie(kube, gie_pool(name="a", port=8000, picker_port=port, labels={"app": "a"}))
    await create_gie(
        kube,
        gie_pool(name="b", port=8000, ports=(8001,), picker_port=port, labels={"app": "b"}),
    )
    await kube.put_pod(namespace=NAMESPACE, name="t-1", labels={"app": "t"}, ip="10.0.3.1")
    await kube.create_pool(
        namespace=NAMESPACE,
        name="a",
        spec={
            **policy_spec(cap=3),
            "selector": {"matchLabels": {"app": "t"}},
            "admission": {"mode": "picker"},
            "targets": [{"envoy": {"cluster": "a"}}],
        },
    )
    # A policy that does not exist: defaults, and a Warning on the GIE object.
    await create_gie(
        kube,
        gie_pool(name="c", port=8000, picker_port=port, labels={"app": "c"}, policy="nope"),
    )
    async with operator(kube, picker_port=port):
        header_b: list[str] = []
        for _ in range(300):
            header_b = await pick(port, headers={"x-trimtab-pool": f"{NAMESPACE}/infpool/b"})
            if header_b:
                break
            await asyncio.sleep(0.05)
        assert sorted(header_b) == ["10.0.2.1:8000", "10.0.2.1:8001"]
        named_a = await pick(port, headers={"x-trimtab-pool": f"{NAMESPACE}/infpool/a"})
        assert named_a == ["10.0.1.1:8000"]
        # A trimtab pool with the same name and admission on is a pool of its own.
        trimtab_a = await pick(port, headers={"x-trimtab-pool": f"{NAMESPACE}/a"})
        assert trimtab_a == ["10.0.3.1:8000"]
        # No name and several pools: the gateway's subset hint says which pool it is.
        assert await pick(port, hint=["10.0.1.1:8000"]) == ["10.0.1.1:8000"]
        assert await pick(port, hint=["10.0.2.1:8001"]) == ["10.0.2.1:8001"]
        # Neither: the picker cannot tell, and does not pick.
        assert await pick(port) == []
        warning = await eventually(
            lambda: kube.events(namespace=NAMESPACE, reason="PolicyNotFound"), within=10
        )
        assert warning[0]["type"] == "Warning"
        assert warning[0]["involvedObject"]["name"] == "c"


# --- real Envoy as a GIE gateway ------------------------------------------------------------

_TYPES = "type.googleapis.com/envoy.extensions"


def gateway_bootstrap(
    *, picker_port: int, upstreams: list[SseUpstream], failure_mode: str
) -> dict[str, Any]:
    """Envoy as a GIE gateway configures it for one InferencePool backend (EPP protocol).

    ext_proc to the endpointPickerRef Service, failing open only for FailOpen; the pool's
    cluster holds the selector's endpoints and picks with override_host (the picker's
    ``x-gateway-destination-endpoint``, metadata first), falling back to round robin — which
    only a FailOpen request reaches. No x-trimtab-pool: gateways do not send one.
    """
    ext_proc_filter = {
        "@type": f"{_TYPES}.filters.http.ext_proc.v3.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": "30s"},
        "failure_mode_allow": failure_mode == "FailOpen",
        "message_timeout": "25s",
        "processing_mode": {
            "request_header_mode": "SEND",
            "response_header_mode": "SEND",
            "request_body_mode": "NONE",
            "response_body_mode": "NONE",
            "request_trailer_mode": "SKIP",
            "response_trailer_mode": "SEND",
        },
        "metadata_options": {
            "forwarding_namespaces": {"untyped": ["envoy.lb", "envoy.lb.subset_hint"]},
            "receiving_namespaces": {"untyped": ["envoy.lb"]},
        },
    }
    round_robin = {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.round_robin",
                    "typed_config": {
                        "@type": f"{_TYPES}.load_balancing_policies.round_robin.v3.RoundRobin"
                    },
                }
            }
        ]
    }
    hcm = {
        "@type": f"{_TYPES}.filters.network.http_connection_manager.v3.HttpConnectionManager",
        "stat_prefix": "gateway",
        "route_config": {
            "virtual_hosts": [
                {
                    "name": "models",
                    "domains": ["*"],
                    "routes": [
                        {
                            "match": {"prefix": "/"},
                            "route": {"cluster": "inferencepool-llama", "timeout": "60s"},
                        }
                    ],
                }
            ]
        },
        "http_filters": [
            {"name": "envoy.filters.http.ext_proc", "typed_config": ext_proc_filter},
            {
                "name": "envoy.filters.http.router",
                "typed_config": {"@type": f"{_TYPES}.filters.http.router.v3.Router"},
            },
        ],
    }
    return {
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}},
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": hcm,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                {
                    "name": "inferencepool-llama",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "load_balancing_policy": picker_load_balancing(round_robin),
                    "load_assignment": {
                        "cluster_name": "inferencepool-llama",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {"endpoint": {"address": _socket(u.ip, u.port)}}
                                    for u in upstreams
                                ]
                            }
                        ],
                    },
                },
                {
                    "name": "epp",
                    "type": "STATIC",
                    "connect_timeout": "0.25s",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": f"{_TYPES}.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "epp",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {"endpoint": {"address": _socket("127.0.0.1", picker_port)}}
                                ]
                            }
                        ],
                    },
                },
            ],
        },
    }


def _socket(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


@pytest_asyncio.fixture()
async def upstreams() -> AsyncIterator[list[SseUpstream]]:
    ips = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
    port = free_port(hosts=ips)
    started = [SseUpstream(name=f"vllm-{i}", ip=ip, port=port) for i, ip in enumerate(ips)]
    async with contextlib.AsyncExitStack() as stack:
        for upstream in started:
            await upstream.start()
            stack.push_async_callback(upstream.stop)
        yield started


@pytest.mark.slow
async def test_envoy_as_gie_gateway_caps_and_failure_modes(
    kube: Cluster, upstreams: list[SseUpstream], tmp_path: Path
) -> None:
    teach(kube)
    port = free_port(hosts=["127.0.0.1"])
    cap = 2
    for upstream in upstreams:
        await kube.put_pod(namespace=NAMESPACE, name=upstream.name, labels=LABELS, ip=upstream.ip)
    await kube.create_pool(namespace=NAMESPACE, name="llama-policy", spec=policy_spec(cap=cap))
    await create_gie(
        kube,
        gie_pool(
            name="llama",
            port=upstreams[0].port,
            picker_port=port,
            failure_mode="FailClose",
            policy="llama-policy",
        ),
    )
    envoys = {
        mode: EnvoyProcess(
            bootstrap=gateway_bootstrap(picker_port=port, upstreams=upstreams, failure_mode=mode),
            workdir=tmp_path / mode,
        )
        for mode in ("FailClose", "FailOpen")
    }
    async with contextlib.AsyncExitStack() as stack:
        for envoy in envoys.values():
            stack.push_async_callback(envoy.stop)
            await envoy.start()
        urls = {
            mode: f"http://127.0.0.1:{await envoy.listener_port()}/v1/completions"
            for mode, envoy in envoys.items()
        }
        client = await stack.enter_async_context(
            httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=100))
        )

        async def send(mode: str, chunks: int = 3) -> httpx.Response:
            headers = {"x-test-chunks": str(chunks), "x-test-interval-ms": "100"}
            return await client.post(urls[mode], content=b"x" * 40, headers=headers)

        async with operator(kube, picker_port=port):
            for _ in range(300):  # bounded: until the picker has the pool's pods
                if (await pick(port))[:1]:
                    break
                await asyncio.sleep(0.05)
            # 18 requests of ~0.3 s at once, 3 pods capped at 2: the rest wait in the queue.
            burst = await asyncio.gather(*(send("FailClose") for _ in range(18)))
            assert [r.status_code for r in burst] == [200] * 18
            assert max(u.max_inflight for u in upstreams) == cap
            assert sum(u.served for u in upstreams) == 18
            # Every request reached the pod the picker chose, by its header.
            addresses = {u.address for u in upstreams}
            assert all(d.split(",")[0] in addresses for u in upstreams for d in u.destinations)
        # The operator (and its picker) is gone.
        closed = [await send("FailClose", chunks=1) for _ in range(3)]
        # Envoy's ext_proc fails the request closed: 500, not the weights.
        assert [r.status_code for r in closed] == [500] * 3
        opened = [await send("FailOpen", chunks=1) for _ in range(3)]
        assert [r.status_code for r in opened] == [200] * 3
