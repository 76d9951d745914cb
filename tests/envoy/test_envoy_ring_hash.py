"""Session affinity in weights mode (``policy.affinity``) on the real Envoy 1.40.

Covered: the generated ring-hash and Maglev clusters pass ``envoy --mode validate`` in the
EDS-file bootstrap, with and without the picker; over ADS, one session header always reaches
one pod while under the bound; a hammered session spills to other pods once its pod is over
``hashBalanceFactor`` (and does not with a bound too high to bite); trimtab's weights bend the
ring (a pod with a tenth of the weight owns far fewer sessions); with the picker down, the
override_host fallback is the session hash. Every load is a bounded count of requests.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.bootstrap import (
    BootstrapCluster,
    BootstrapOptions,
    PickerOptions,
    build_bootstrap,
    render_bootstrap,
)
from trimtab.targets.envoy_file import EdsFileTarget
from trimtab_lab.envoy import EnvoyProcess, envoy_binary

CLUSTER = "llama"  # the cluster of conftest's envoy_xds
PODS = ("a", "b", "c", "d")
SESSION = "x-session-id"
# conftest's fixtures, by their types (tests/envoy is no package: it would shadow ``envoy``).
Upstream = Any
XdsEnv = Any


@pytest.fixture
async def upstreams(upstreams: dict[str, Upstream]) -> AsyncIterator[dict[str, Upstream]]:
    """conftest's pods a and b, and c and d of the same kind."""
    kind = type(upstreams["a"])
    extra = {name: kind(name) for name in PODS[2:]}
    try:
        for upstream in extra.values():
            await upstream.start()
        yield {**upstreams, **extra}
    finally:
        for upstream in extra.values():
            await upstream.stop()


def _affinity_spec(*, mode: str = "ringHash", factor: int = 150) -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "endpoints": [{"name": "a", "address": "127.0.0.1", "port": 8000}],
            "targets": [{"envoy": {"cluster": CLUSTER}}],
            "policy": {
                "slowStart": "0s",
                "affinity": {"mode": mode, "sessionHeader": SESSION, "hashBalanceFactor": factor},
            },
        }
    )


async def _hash_on(env: XdsEnv, spec: InferencePoolSpec, weights: dict[str, int]) -> None:
    """Serve ``spec`` with ``weights`` and wait until Envoy holds the consistent-hash cluster."""
    await env.apply(weights, spec=spec)
    await env.wait_weights(weights)
    expected = f"envoy.load_balancing_policies.{_policy_name(spec)}"
    for _ in range(400):  # bounded: CDS lands within milliseconds
        if await _active_policy(env) == expected:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"Envoy never held {expected}: {await _active_policy(env)}")


def _policy_name(spec: InferencePoolSpec) -> str:
    return "maglev" if spec.policy.affinity.mode == "maglev" else "ring_hash"


async def _active_policy(env: XdsEnv) -> str:
    response = await env.envoy.client.get(
        f"{env.envoy.admin_url}/config_dump", params={"resource": "dynamic_active_clusters"}
    )
    for entry in response.json().get("configs", []):
        cluster = entry.get("cluster", {})
        if cluster.get("name") == CLUSTER:
            policies = cluster.get("load_balancing_policy", {}).get("policies", [])
            return str(policies[0]["typed_extension_config"]["name"]) if policies else ""
    return ""


async def _served_by(client: httpx.AsyncClient, url: str, session: str) -> str:
    response = await client.post(url, content=b"{}", headers={SESSION: session})
    assert response.status_code == 200, response.text
    return response.text


async def _url(envoy: EnvoyProcess) -> str:
    return f"http://127.0.0.1:{await envoy.listener_port()}/v1/completions"


@pytest.mark.parametrize("picker", [False, True], ids=["weights", "picker"])
@pytest.mark.parametrize("mode", ["ringHash", "maglev"])
def test_envoy_validates_the_affinity_bootstrap(tmp_path: Path, mode: str, picker: bool) -> None:
    spec = _affinity_spec(mode=mode)
    eds_dir = tmp_path / "eds"
    eds_dir.mkdir()
    (eds_dir / f"{CLUSTER}.json").write_text("{}")
    options = BootstrapOptions(
        clusters=(BootstrapCluster(name=CLUSTER, policy=spec.policy, retry=spec.retry),),
        eds_dir=str(eds_dir),
        picker=PickerOptions(host="127.0.0.1", port=9002) if picker else None,
    )
    path = tmp_path / "envoy.yaml"
    path.write_text(render_bootstrap(options))
    check = subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(path), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr[-2000:]


@pytest.mark.parametrize("mode", ["ringHash", "maglev"])
async def test_one_session_stays_on_one_pod_under_the_bound(envoy_xds: XdsEnv, mode: str) -> None:
    await _hash_on(envoy_xds, _affinity_spec(mode=mode), dict.fromkeys(PODS, 1000))
    url = await _url(envoy_xds.envoy)
    homes: dict[str, set[str]] = {}
    for _ in range(5):  # one request at a time: every pod stays under the bound
        for index in range(40):
            session = f"conversation-{index}"
            homes.setdefault(session, set()).add(await _served_by(envoy_xds.client, url, session))
    assert all(len(pods) == 1 for pods in homes.values()), homes
    # The sessions spread over the fleet: affinity, not a single pod.
    assert len({next(iter(pods)) for pods in homes.values()}) >= 3


@pytest.mark.parametrize(("factor", "spills"), [(100, True), (10_000, False)])
async def test_a_hammered_session_spills_over_the_bound(
    envoy_xds: XdsEnv, factor: int, spills: bool
) -> None:
    await _hash_on(envoy_xds, _affinity_spec(factor=factor), dict.fromkeys(PODS, 1000))
    url = await _url(envoy_xds.envoy)
    home = await _served_by(envoy_xds.client, url, "hot")
    for upstream in envoy_xds.upstreams.values():
        upstream.delay = 2.0
        upstream.max_inflight = 0

    async def one(delay: float) -> str:
        await asyncio.sleep(delay)
        return await _served_by(envoy_xds.client, url, "hot")

    # Staggered so each long request is active in Envoy before the next one is balanced.
    served = await asyncio.gather(*(one(0.1 * i) for i in range(8)))
    counts = collections.Counter(served)
    if spills:
        assert len(counts) >= 2, counts
        assert counts[home] >= 1, counts
        assert envoy_xds.upstreams[home].max_inflight <= 4, counts
    else:
        assert counts == {home: 8}


async def test_weights_bend_the_ring(envoy_xds: XdsEnv) -> None:
    weights = {"a": 1000, "b": 1000, "c": 1000, "d": 100}
    await _hash_on(envoy_xds, _affinity_spec(), weights)
    url = await _url(envoy_xds.envoy)
    sessions = 400
    served = collections.Counter(
        [await _served_by(envoy_xds.client, url, f"user-{i}") for i in range(sessions)]
    )
    assert sum(served.values()) == sessions
    heavy = [served[pod] for pod in ("a", "b", "c")]
    # Expected: d owns 100/3100 of the ring (about 13 sessions of 400) and each heavy pod
    # about 129; the tolerance is generous, the ratio is still far from equal weights' 1.
    assert served["d"] < 0.35 * min(heavy), served
    assert min(heavy) > sessions * 0.15, served


async def test_with_the_picker_down_the_fallback_is_the_session_hash(
    tmp_path: Path, upstreams: dict[str, Upstream], envoy_factory: Any
) -> None:
    spec = _affinity_spec()
    eds_dir = tmp_path / "eds"
    target = EdsFileTarget(cluster=CLUSTER, path=eds_dir / f"{CLUSTER}.json")
    endpoints = {
        PodName(n): Endpoint(PodName(n), "127.0.0.1", u.port) for n, u in upstreams.items()
    }
    decision = Decision(
        pods=tuple(PodDecision(PodName(n), 1000, 64, PodState.SERVING, "test") for n in PODS)
    )
    await target.apply(
        pool=PoolKey("serving", "llama"), spec=spec, decision=decision, endpoints=endpoints
    )
    config = build_bootstrap(
        BootstrapOptions(
            clusters=(BootstrapCluster(name=CLUSTER, policy=spec.policy, retry=spec.retry),),
            listener_address="127.0.0.1",
            listener_port=0,
            admin_port=0,
            eds_dir=str(eds_dir),
            # Nothing listens there: ext_proc fails open, override_host finds no pick.
            picker=PickerOptions(host="127.0.0.1", port=_closed_port(), health_interval_s=0.2),
        )
    )
    envoy = await envoy_factory(config)
    for _ in range(400):  # bounded: the EDS file is read at startup
        if len(await envoy.host_weights(CLUSTER)) == len(PODS):
            break
        await asyncio.sleep(0.025)
    url = await _url(envoy)
    homes: dict[str, set[str]] = {}
    async with httpx.AsyncClient(timeout=20.0) as client:
        for _ in range(3):
            for index in range(30):
                session = f"s-{index}"
                homes.setdefault(session, set()).add(await _served_by(client, url, session))
    assert all(len(pods) == 1 for pods in homes.values()), homes
    assert len({next(iter(pods)) for pods in homes.values()}) >= 3


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port
