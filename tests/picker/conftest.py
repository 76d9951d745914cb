"""The picker against the real Envoy 1.40: SSE upstreams, a picker, Envoy with file EDS.

``SseUpstream`` is a pod on its own loopback address (127.0.0.2, .3, ...) that streams
server-sent events, counts in-flight requests exactly (now and at most) and obeys test headers:
``x-test-chunks`` and ``x-test-interval-ms`` shape the stream, ``x-test-reset-after`` aborts the
connection after that many chunks (an upstream reset), ``x-test-seq`` is recorded in arrival
order. ``PickerEnv`` runs the picker in-process, writes the pool's EDS file and starts Envoy
from ``build_bootstrap(picker=...)``; everything stops even when a test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client import CollectorRegistry

from support.emulators import free_port
from trimtab.admission import Admission, AdmissionSettings, PodCapacity
from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.picker import PickerPools, PickerServer, serve_picker
from trimtab.targets.bootstrap import (
    BootstrapCluster,
    BootstrapOptions,
    PickerOptions,
    build_bootstrap,
)
from trimtab.targets.envoy_file import EdsFileTarget
from trimtab_lab.envoy import EnvoyProcess

CLUSTER = "llama"
POOL = PoolKey("serving", CLUSTER)


class SseUpstream:
    """An HTTP/1.1 server streaming SSE chunks; counts in-flight exactly."""

    def __init__(self, *, name: str, ip: str, port: int) -> None:
        self.name = name
        self.ip = ip
        self.port = port
        self.inflight = 0
        self.max_inflight = 0
        self.served = 0
        self.sequence: list[str] = []
        self.destinations: list[str] = []
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.ip, self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            # A handler may be between chunks of a stream nobody reads any more.
            for handler in list(self._handlers):
                handler.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                headers = {}
                for line in head.split("\r\n")[1:]:
                    key, _, value = line.partition(":")
                    headers[key.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or 0)
                if length:
                    await reader.readexactly(length)
                if not await self._serve(writer, headers):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            self._handlers.discard(handler)
            writer.close()

    async def _serve(self, writer: asyncio.StreamWriter, headers: dict[str, str]) -> bool:
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        if "x-test-seq" in headers:
            self.sequence.append(headers["x-test-seq"])
        self.destinations.append(headers.get("x-gateway-destination-endpoint", ""))
        chunks = int(headers.get("x-test-chunks", "3"))
        interval = int(headers.get("x-test-interval-ms", "10")) / 1000
        reset_after = int(headers.get("x-test-reset-after", "-1"))
        try:
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\nx-served-by: " + self.name.encode() + b"\r\n\r\n"
            )
            for index in range(chunks):
                if index == reset_after:
                    writer.transport.abort()
                    return False
                data = f"data: {self.name} {index}\n\n".encode()
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
                await asyncio.sleep(interval)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            self.served += 1
            return True
        finally:
            self.inflight -= 1


@dataclass
class PickerEnv:
    """Upstreams, a running picker and an Envoy whose pool cluster goes through it."""

    upstreams: dict[str, SseUpstream]
    picker: PickerServer
    """The in-process picker (a placeholder that fails on use when the picker is a child)."""
    envoy: EnvoyProcess
    client: httpx.AsyncClient
    registry: CollectorRegistry
    settings: AdmissionSettings
    caps: dict[str, int] = field(default_factory=dict)
    url: str = ""

    @property
    def pool(self) -> Any:
        found = self.picker.pools.get(CLUSTER)
        assert found is not None
        return found

    def update(self, *, settings: AdmissionSettings | None = None, **caps: int) -> None:
        """Tell the picker the pods (all upstreams, or only those given) and their caps."""
        self.settings = settings or self.settings
        self.caps = caps or self.caps
        pods = [
            PodCapacity(name=PodName(name), address=self.upstreams[name].address, cap=cap)
            for name, cap in self.caps.items()
        ]
        self.picker.pools.update(
            pool=CLUSTER, pods=pods, settings=self.settings, now=time.monotonic()
        )

    def in_flight(self) -> dict[str, int]:
        return {str(pod.name): pod.in_flight for pod in self.pool.stats().pods}

    def metric(self, name: str, **labels: str) -> float:
        return self.registry.get_sample_value(name, {"pool": CLUSTER, **labels}) or 0.0

    async def get(self, *, headers: dict[str, str] | None = None) -> httpx.Response:
        response = await self.client.post(self.url, content=b"x" * 40, headers=headers or {})
        return response

    async def settle(self, predicate: Callable[[], bool], *, what: str) -> None:
        for _ in range(400):  # bounded: stream ends reach the picker within milliseconds
            if predicate():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"never saw {what}")

    async def picker_healthy(self, healthy: bool) -> None:
        for _ in range(400):  # bounded: health checks run every second
            url = f"{self.envoy.admin_url}/clusters?format=json"
            data = (await self.envoy.client.get(url)).json()
            for status in data["cluster_statuses"]:
                if status["name"] == "trimtab_picker":
                    flags = status["host_statuses"][0]["health_status"]
                    if (flags.get("eds_health_status") == "HEALTHY" and len(flags) == 1) == healthy:
                        return
            await asyncio.sleep(0.05)
        raise AssertionError(f"the picker never became {'healthy' if healthy else 'unhealthy'}")


def pool_spec(upstreams: Sequence[SseUpstream]) -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "endpoints": [{"name": u.name, "address": u.ip, "port": u.port} for u in upstreams],
            "targets": [{"envoyFile": {"cluster": CLUSTER, "path": "/eds/llama.json"}}],
            "policy": {"slowStart": "0s"},
            "retry": {"numRetries": 2, "retryOn": ["connect-failure", "reset-before-request"]},
        }
    )


def picker_bootstrap(
    *, picker_port: int, eds_dir: Path, spec: InferencePoolSpec, queue_ttl_s: float = 30.0
) -> dict[str, Any]:
    cluster = BootstrapCluster(
        name=CLUSTER, policy=spec.policy, retry=spec.retry, queue_ttl_s=queue_ttl_s
    )
    return build_bootstrap(
        BootstrapOptions(
            clusters=(cluster,),
            listener_address="127.0.0.1",
            listener_port=0,
            admin_port=0,
            node_id="picker-test",
            eds_dir=str(eds_dir),
            picker=PickerOptions(host="127.0.0.1", port=picker_port, health_interval_s=0.2),
        )
    )


def http_filters(config: dict[str, Any]) -> list[dict[str, Any]]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    filters: list[dict[str, Any]] = hcm["typed_config"]["http_filters"]
    return filters


def pool_cluster(config: dict[str, Any]) -> dict[str, Any]:
    for cluster in config["static_resources"]["clusters"]:
        if cluster["name"] == CLUSTER:
            return cluster  # type: ignore[no-any-return]
    raise AssertionError("no pool cluster")


@contextlib.asynccontextmanager
async def picker_env(
    tmp_path: Path,
    *,
    names: Sequence[str] = ("a", "b", "c"),
    listening: Sequence[str] | None = None,
    settings: AdmissionSettings | None = None,
    caps: dict[str, int] | None = None,
    edit: Callable[[dict[str, Any], dict[str, SseUpstream]], None] | None = None,
    factory: Callable[[AdmissionSettings], Admission] | None = None,
    child: list[asyncio.subprocess.Process] | None = None,
) -> AsyncIterator[PickerEnv]:
    """Upstreams on 127.0.0.2.. (only ``listening`` ones serve), picker, Envoy; all stopped."""
    ips = [f"127.0.0.{index + 2}" for index in range(len(names))]
    port = free_port(hosts=ips)
    upstreams = {
        name: SseUpstream(name=name, ip=ip, port=port) for name, ip in zip(names, ips, strict=True)
    }
    settings = settings or AdmissionSettings()
    registry = CollectorRegistry()
    pools = PickerPools() if factory is None else PickerPools(factory=factory)
    async with contextlib.AsyncExitStack() as stack:
        for name in listening if listening is not None else names:
            await upstreams[name].start()
            stack.push_async_callback(upstreams[name].stop)
        picker = await stack.enter_async_context(
            serve_picker(host="127.0.0.1", port=0, pools=pools, ready=True, registry=registry)
        )
        picker_port = picker.port
        if child is not None:
            # The picker Envoy calls runs in its own process (it can be SIGKILLed).
            picker_port = await _start_child(stack, child, upstreams, caps or {})
        spec = pool_spec(list(upstreams.values()))
        eds_dir = tmp_path / "eds"
        await EdsFileTarget(cluster=CLUSTER, path=eds_dir / f"{CLUSTER}.json").apply(
            pool=POOL,
            spec=spec,
            decision=Decision(
                pods=tuple(PodDecision(PodName(n), 1, 64, PodState.SERVING, "test") for n in names)
            ),
            endpoints={
                PodName(n): Endpoint(PodName(n), u.ip, u.port) for n, u in upstreams.items()
            },
        )
        config = picker_bootstrap(
            picker_port=picker_port,
            eds_dir=eds_dir,
            spec=spec,
            queue_ttl_s=settings.queue_ttl_s,
        )
        if edit is not None:
            edit(config, upstreams)
        envoy = EnvoyProcess(bootstrap=config, workdir=tmp_path / "envoy")
        stack.push_async_callback(envoy.stop)
        await envoy.start()
        client = await stack.enter_async_context(
            httpx.AsyncClient(timeout=30.0, limits=httpx.Limits(max_connections=200))
        )
        env = PickerEnv(
            upstreams=upstreams,
            picker=picker,
            envoy=envoy,
            client=client,
            registry=registry,
            settings=settings,
            url=f"http://127.0.0.1:{await envoy.listener_port()}/v1/completions",
        )
        env.update(**(caps or dict.fromkeys(names, 4)))
        await env.picker_healthy(True)
        yield env


async def _start_child(
    stack: contextlib.AsyncExitStack,
    child: list[asyncio.subprocess.Process],
    upstreams: dict[str, SseUpstream],
    caps: dict[str, int],
) -> int:
    pods = [{"name": n, "address": upstreams[n].address, "cap": c} for n, c in caps.items()]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("picker_child.py")),
        CLUSTER,
        json.dumps(pods),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    child.append(process)

    async def kill() -> None:
        if process.returncode is None:
            process.kill()
        await process.wait()

    stack.push_async_callback(kill)
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), timeout=30)
    assert line.startswith(b"PORT "), line
    return int(line.split()[1])
