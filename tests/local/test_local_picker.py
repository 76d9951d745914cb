"""The operator feeds its picker: ``trimtab run --local --picker-port`` behind a real Envoy.

Three emulated vLLM replicas, a pool with ``admission.mode: picker`` and a cap of 2 per pod,
Envoy from ``trimtab envoy-bootstrap --pools ... --picker``. Concurrent streams far above the
fleet's caps all succeed, no replica ever holds more than its cap, and the picker's own series
show the pool's caps and grants: the decision reached the admission without any glue code.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from support.emulators import Pod, free_port
from trimtab.metrics.exposition import parse_exposition
from trimtab_lab.emulator.fleet import DEFAULT_MODEL, emulate
from trimtab_lab.envoy import EnvoyProcess

from .conftest import engine_load, poll

pytestmark = pytest.mark.slow

TRIMTAB = Path(sys.executable).parent / "trimtab"
CAP = 2


def _pools_file(path: Path, pods: list[Pod]) -> Path:
    pool = {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": "default"},
        "spec": {
            "endpoints": [{"name": p.name, "address": p.ip, "port": p.port} for p in pods],
            "metrics": {"source": "direct", "interval": "500ms", "staleAfter": "5s"},
            "policy": {"slowStart": "0s", "maxInFlightPerPod": CAP, "minInFlightPerPod": 1},
            "admission": {"mode": "picker", "queueLength": 200, "queueTtl": "60s"},
            "targets": [{"envoy": {"cluster": "llama"}}],
        },
    }
    path.write_text(yaml.safe_dump(pool))
    return path


async def _run(*args: str) -> bytes:
    process = await asyncio.create_subprocess_exec(
        str(TRIMTAB), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, err.decode()
    return out


@contextlib.asynccontextmanager
async def _stack(tmp_path: Path) -> AsyncIterator[tuple[list[Pod], str, str]]:
    async with emulate(replicas=3, time_scale=4.0) as fleet:
        pods = [
            Pod(name=f"vllm-{i}", ip="127.0.0.1", port=port) for i, port in enumerate(fleet.ports)
        ]
        pools = _pools_file(tmp_path / "pools.yaml", pods)
        xds, picker, metrics = (free_port(hosts=["127.0.0.1"]) for _ in range(3))
        log = tmp_path / "trimtab.log"
        async with contextlib.AsyncExitStack() as stack:
            stream = stack.enter_context(log.open("wb"))
            trimtab = await asyncio.create_subprocess_exec(
                str(TRIMTAB),
                *("run", "--local", str(pools), "--status-file", str(tmp_path / "status.json")),
                *("--xds-port", str(xds), "--picker-port", str(picker)),
                *("--metrics-port", str(metrics)),
                stdout=stream,
                stderr=stream,
            )

            async def kill() -> None:
                if trimtab.returncode is None:
                    trimtab.kill()
                await trimtab.wait()

            stack.push_async_callback(kill)
            bootstrap = yaml.safe_load(
                await _run(
                    *("envoy-bootstrap", "--pools", str(pools), "--node-id", "picker-e2e"),
                    *("--xds-address", f"127.0.0.1:{xds}", "--picker", f"127.0.0.1:{picker}"),
                    *("--listener-address", "127.0.0.1", "--listener-port", "0"),
                    *("--admin-port", "0"),
                )
            )
            envoy = EnvoyProcess(bootstrap=bootstrap, workdir=tmp_path / "envoy")
            stack.push_async_callback(envoy.stop)
            await envoy.start()
            url = f"http://127.0.0.1:{await envoy.listener_port()}/v1/completions"
            yield pods, url, f"http://127.0.0.1:{metrics}/metrics"


def _series(text: str, name: str) -> dict[str, float]:
    return {s.labels.get("pod", ""): s.value for s in parse_exposition(text=text, names={name})}


async def test_the_decided_caps_are_what_the_picker_enforces(tmp_path: Path) -> None:
    async with (
        _stack(tmp_path) as (pods, url, metrics_url),
        httpx.AsyncClient(timeout=60.0, limits=httpx.Limits(max_connections=64)) as client,
    ):

        async def caps() -> dict[str, float]:
            found = _series((await client.get(metrics_url)).text, "trimtab_picker_pod_cap")
            return found if len(found) == len(pods) else {}

        assert set((await poll(caps, timeout_s=20, what="the pool in the picker")).values()) == {
            CAP
        }
        body = {"model": DEFAULT_MODEL, "prompt": "hello " * 50, "max_tokens": 40, "stream": True}
        peak: dict[str, float] = {}
        done = asyncio.Event()

        async def watch() -> None:
            while not done.is_set():  # bounded by the load below
                for pod in pods:
                    peak[pod.name] = max(peak.get(pod.name, 0.0), await engine_load(client, pod))
                await asyncio.sleep(0.05)

        async def one() -> int:
            async with client.stream("POST", url, json=body) as response:
                async for _ in response.aiter_bytes():
                    pass
                return response.status_code

        watcher = asyncio.create_task(watch())
        try:
            statuses = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(30))), 120)
        finally:
            done.set()
            await watcher
        assert statuses == [200] * 30
        assert peak and max(peak.values()) <= CAP, peak
        grants = parse_exposition(
            text=(await client.get(metrics_url)).text, names={"trimtab_picker_grants_total"}
        )
        assert sum(s.value for s in grants) >= 30
