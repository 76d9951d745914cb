"""Fixtures of the local-mode tests: ``trimtab run --local`` as a real process, with real parts.

``replicas`` are three emulated vLLM replicas on 127.0.0.1 (each on its own port, twice real
speed); ``pools_file`` declares them as the static endpoints of one pool read directly at a
1 s interval with an ``envoy`` target; ``stack`` starts ``trimtab run --local`` (the venv's
console script) with xDS and /metrics on free ports and a status file, then an Envoy
bootstrapped from ``trimtab envoy-bootstrap --pools``. Both processes are killed at teardown,
also when the test failed or trimtab never came up; their logs stay in ``tmp_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import pytest_asyncio
import yaml

from support.emulators import Pod, free_port
from trimtab.metrics.exposition import parse_exposition
from trimtab_lab.emulator.fleet import emulate
from trimtab_lab.envoy import EnvoyProcess

NAMESPACE = "default"
POOL = "llama"
CLUSTER = "llama"
POD_NAMES = ("vllm-0", "vllm-1", "vllm-2")
INTERVAL_S = 1.0
TRIMTAB = Path(sys.executable).parent / "trimtab"
_LOAD_NAMES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
_START_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 10.0

T = TypeVar("T")


async def poll(
    check: Callable[[], Awaitable[T]], *, timeout_s: float = 15.0, every_s: float = 0.02, what: str
) -> T:
    """Await ``check`` until it returns something truthy; fail with its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = await check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what} not seen in {timeout_s}s; last value {result!r}")
        await asyncio.sleep(every_s)


async def engine_load(client: httpx.AsyncClient, pod: Pod) -> float:
    """Running plus waiting requests as the replica's own ``/metrics`` shows them now."""
    text = (await client.get(f"{pod.url}/metrics")).text
    return sum(series.value for series in parse_exposition(text=text, names=_LOAD_NAMES))


@dataclass
class Stack:
    """The running processes and what the test reads from them."""

    pods: list[Pod]
    trimtab: asyncio.subprocess.Process
    envoy: EnvoyProcess
    status_file: Path
    metrics_url: str
    log: Path

    def address(self, pod: Pod) -> str:
        return f"{pod.ip}:{pod.port}"

    async def envoy_weights(self) -> dict[str, int]:
        """Weight per pod name, as Envoy's admin ``/clusters`` holds it now."""
        by_address = await self.envoy.host_weights(CLUSTER)
        return {
            p.name: by_address[self.address(p)] for p in self.pods if self.address(p) in by_address
        }

    def status(self) -> dict[str, Any]:
        """The pool's entry in the status file (empty before the first write)."""
        try:
            data: dict[str, Any] = json.loads(self.status_file.read_text())
        except FileNotFoundError:
            return {}
        pool: dict[str, Any] = data.get(f"{NAMESPACE}/{POOL}", {})
        return pool

    def status_weights(self) -> dict[str, int]:
        return {row["name"]: row["weight"] for row in self.status().get("pods", [])}

    async def terminate(self) -> int:
        """SIGTERM trimtab and wait (bounded) for its exit code."""
        self.trimtab.send_signal(signal.SIGTERM)
        return await asyncio.wait_for(self.trimtab.wait(), timeout=_STOP_TIMEOUT_S)


@pytest_asyncio.fixture()
async def replicas() -> AsyncIterator[list[Pod]]:
    async with emulate(replicas=len(POD_NAMES), time_scale=2.0) as fleet:
        yield [
            Pod(name=name, ip="127.0.0.1", port=port)
            for name, port in zip(POD_NAMES, fleet.ports, strict=True)
        ]


@pytest.fixture()
def pools_file(tmp_path: Path, replicas: list[Pod]) -> Path:
    pool = {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "engine": "vllm",
            "endpoints": [{"name": p.name, "address": p.ip, "port": p.port} for p in replicas],
            "metrics": {"source": "direct", "interval": f"{INTERVAL_S:g}s", "staleAfter": "5s"},
            "policy": {"slowStart": "0s"},
            "targets": [{"envoy": {"cluster": CLUSTER}}],
        },
    }
    path = tmp_path / "pools.yaml"
    path.write_text(yaml.safe_dump(pool))
    return path


async def _bootstrap(*, pools_file: Path, xds_port: int) -> dict[str, Any]:
    """What ``trimtab envoy-bootstrap`` prints for the pools file, all on 127.0.0.1."""
    process = await asyncio.create_subprocess_exec(
        str(TRIMTAB),
        *("envoy-bootstrap", "--pools", str(pools_file), "--node-id", "local-test"),
        *("--xds-address", f"127.0.0.1:{xds_port}", "--listener-address", "127.0.0.1"),
        *("--listener-port", "0", "--admin-port", "0"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=_START_TIMEOUT_S)
    assert process.returncode == 0, err.decode()
    config: dict[str, Any] = yaml.safe_load(out)
    return config


@pytest_asyncio.fixture()
async def stack(tmp_path: Path, replicas: list[Pod], pools_file: Path) -> AsyncIterator[Stack]:
    xds_port = free_port(hosts=["127.0.0.1"])
    metrics_port = free_port(hosts=["127.0.0.1"])
    status_file = tmp_path / "status.json"
    log = tmp_path / "trimtab.log"
    envoy = EnvoyProcess(
        bootstrap=await _bootstrap(pools_file=pools_file, xds_port=xds_port),
        workdir=tmp_path / "envoy",
    )
    async with contextlib.AsyncExitStack() as cleanup:
        stream = cleanup.enter_context(log.open("wb"))
        trimtab = await asyncio.create_subprocess_exec(
            str(TRIMTAB),
            *("run", "--local", str(pools_file), "--status-file", str(status_file)),
            *("--xds-port", str(xds_port), "--metrics-port", str(metrics_port)),
            stdout=stream,
            stderr=stream,
        )
        cleanup.push_async_callback(_kill, trimtab)
        cleanup.push_async_callback(envoy.stop)
        found = Stack(
            pods=replicas,
            trimtab=trimtab,
            envoy=envoy,
            status_file=status_file,
            metrics_url=f"http://127.0.0.1:{metrics_port}/metrics",
            log=log,
        )

        async def decided() -> bool:
            # Envoy only becomes ready with a first decision; without it, after 15 s.
            if trimtab.returncode is not None:
                raise AssertionError(f"trimtab exited {trimtab.returncode}: {log.read_text()}")
            return len(found.status_weights()) == len(replicas)

        await poll(decided, timeout_s=_START_TIMEOUT_S, every_s=0.05, what="a first decision")
        await envoy.start()
        yield found


async def _kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        process.kill()
    await asyncio.wait_for(process.wait(), timeout=_STOP_TIMEOUT_S)
