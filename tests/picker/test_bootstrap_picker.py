"""``trimtab envoy-bootstrap --picker``: ext_proc + override_host, validated by Envoy 1.40.

Covered: file EDS and ADS variants accepted by ``envoy --mode validate``; the filter chain and
processing mode; override_host sources and its least-request fallback; message_timeout above
the longest queue TTL; a pool with admission off skips the picker and keeps its plain policy.
"""

from __future__ import annotations

import asyncio
import subprocess

import httpx
import yaml
from click.testing import CliRunner

from support.emulators import free_port
from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.commands.envoy_bootstrap import envoy_bootstrap
from trimtab.targets.bootstrap import (
    BootstrapCluster,
    BootstrapOptions,
    PickerOptions,
    build_bootstrap,
)
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import XdsServer
from trimtab_lab.envoy import EnvoyProcess, envoy_binary

from .conftest import SseUpstream

POOLS = """
apiVersion: trimtab.io/v1alpha1
kind: InferencePool
metadata: {name: llama, namespace: serving}
spec:
  endpoints: [{name: a, address: 10.0.0.1, port: 8000}]
  admission: {mode: picker, queueTtl: 45s}
  targets: [{envoy: {cluster: llama}}]
---
apiVersion: trimtab.io/v1alpha1
kind: InferencePool
metadata: {name: plain, namespace: serving}
spec:
  endpoints: [{name: a, address: 10.0.0.2, port: 8000}]
  targets: [{envoy: {cluster: plain}}]
"""


def _validate(tmp_path, text):
    path = tmp_path / "envoy.yaml"
    path.write_text(text)
    return subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _bootstrap(tmp_path, *args):
    pools = tmp_path / "pools.yaml"
    pools.write_text(POOLS)
    result = CliRunner().invoke(
        envoy_bootstrap, ["--pools", str(pools), "--picker", "127.0.0.1:9002", *args]
    )
    assert result.exit_code == 0, result.output
    return result.output


def test_ads_bootstrap_with_picker_validates(tmp_path):
    text = _bootstrap(tmp_path)
    check = _validate(tmp_path, text)
    assert check.returncode == 0, check.stderr[-2000:]
    config = yaml.safe_load(text)
    clusters = {c["name"]: c for c in config["static_resources"]["clusters"]}
    # Only the picked pool is static here; "plain" still comes over CDS.
    assert set(clusters) == {"trimtab_picker", "trimtab_xds", "llama"}
    policy = clusters["llama"]["load_balancing_policy"]["policies"][0]["typed_extension_config"]
    assert policy["name"] == "envoy.load_balancing_policies.override_host"
    override = policy["typed_config"]
    assert override["override_host_sources"] == [
        {"metadata": {"key": "envoy.lb", "path": [{"key": "x-gateway-destination-endpoint"}]}},
        {"header": "x-gateway-destination-endpoint"},
    ]
    fallback = override["fallback_policy"]["policies"][0]["typed_extension_config"]
    assert fallback["name"] == "envoy.load_balancing_policies.least_request"
    assert "lb_policy" not in clusters["llama"]
    picker = clusters["trimtab_picker"]
    assert picker["health_checks"][0]["grpc_health_check"] == {"service_name": "readiness"}
    assert picker["common_lb_config"]["healthy_panic_threshold"] == {"value": 0}
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters = hcm["typed_config"]["http_filters"]
    assert [f["name"] for f in filters] == [
        "envoy.filters.http.header_mutation",
        "envoy.filters.http.ext_proc",
        "envoy.filters.http.header_to_metadata",
        "envoy.filters.http.router",
    ]
    ext_proc = filters[1]["typed_config"]
    assert ext_proc["failure_mode_allow"] is True
    assert ext_proc["message_timeout"] == "50s"  # 45 s TTL + 5 s
    assert ext_proc["processing_mode"] == {
        "request_header_mode": "SEND",
        "response_header_mode": "SEND",
        "request_body_mode": "NONE",
        "response_body_mode": "NONE",
        "request_trailer_mode": "SKIP",
        "response_trailer_mode": "SEND",
    }
    routes = hcm["typed_config"]["route_config"]["virtual_hosts"][0]["routes"]
    per_route = {r["route"]["cluster"]: r["typed_per_filter_config"] for r in routes}
    assert per_route["plain"]["envoy.filters.http.ext_proc"]["disabled"] is True
    assert per_route["llama"]["envoy.filters.http.ext_proc"]["overrides"][
        "grpc_initial_metadata"
    ] == [{"key": "x-trimtab-pool", "value": "llama"}]


def test_file_eds_bootstrap_with_picker_validates(tmp_path):
    eds = tmp_path / "eds"
    eds.mkdir()
    for name in ("llama", "plain"):
        (eds / f"{name}.json").write_text("{}")
    text = _bootstrap(tmp_path, "--eds-dir", str(eds))
    check = _validate(tmp_path, text)
    assert check.returncode == 0, check.stderr[-2000:]
    clusters = {c["name"]: c for c in yaml.safe_load(text)["static_resources"]["clusters"]}
    assert "load_balancing_policy" in clusters["llama"]
    assert clusters["plain"]["lb_policy"] == "LEAST_REQUEST"


def test_picker_address_must_be_host_port(tmp_path):
    result = CliRunner().invoke(envoy_bootstrap, ["--cluster", "a", "--picker", "nowhere"])
    assert result.exit_code == 2
    assert "--picker" in result.output


async def test_ads_static_pool_cluster_gets_endpoints_and_cds_is_not_rejected(tmp_path):
    """With ADS the picked cluster is static (its policy is the picker's) and takes its
    endpoints over ADS; CDS still sends a cluster of that name, which Envoy must not NACK."""
    upstream = SseUpstream(name="a", ip="127.0.0.2", port=free_port(hosts=["127.0.0.2"]))
    await upstream.start()
    cache = SnapshotCache()
    server = XdsServer(cache=cache)
    port = await server.start(host="127.0.0.1", port=0)
    spec = InferencePoolSpec.model_validate(
        {
            "endpoints": [{"name": "a", "address": upstream.ip, "port": upstream.port}],
            "targets": [{"envoy": {"cluster": "llama"}}],
        }
    )
    await EnvoyXdsTarget(cache=cache, cluster="llama").apply(
        pool=PoolKey("serving", "llama"),
        spec=spec,
        decision=Decision(pods=(PodDecision(PodName("a"), 1, 8, PodState.SERVING, "t"),)),
        endpoints={PodName("a"): Endpoint(PodName("a"), upstream.ip, upstream.port)},
    )
    cache.open()
    # No picker listens on this port: every request fails open to the weights.
    config = build_bootstrap(
        BootstrapOptions(
            clusters=(BootstrapCluster(name="llama"),),
            xds_port=port,
            listener_address="127.0.0.1",
            listener_port=0,
            admin_port=0,
            picker=PickerOptions(host="127.0.0.1", port=1),
        )
    )
    envoy = EnvoyProcess(bootstrap=config, workdir=tmp_path / "envoy")
    try:
        await envoy.start()
        url = f"http://127.0.0.1:{await envoy.listener_port()}/"
        async with httpx.AsyncClient(timeout=10) as client:
            for _ in range(200):  # bounded: endpoints arrive over ADS within milliseconds
                if await envoy.host_weights("llama"):
                    break
                await asyncio.sleep(0.025)
            assert (await client.get(url)).headers["x-served-by"] == "a"
        stats = await envoy.stats("cluster_manager.cds")
        assert stats["cluster_manager.cds.update_rejected"] == 0
        assert stats["cluster_manager.cds.update_success"] >= 1
    finally:
        await envoy.stop()
        await server.stop(grace=0)
        await upstream.stop()
