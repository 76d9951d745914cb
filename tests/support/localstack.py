"""A whole local data path for fault tests: emulated replicas, ``trimtab run --local``, Envoy.

:func:`local_stack` serves three in-process vLLM emulators on 127.0.0.1 (their
:class:`~trimtab_lab.emulator.server.ReplicaServer` objects are exposed, so a test can refuse
``/metrics``), writes a pools file for them, runs trimtab as a real process (which
:meth:`LocalStack.kill_trimtab` SIGKILLs and :meth:`LocalStack.start_trimtab` starts again on
the same ports and status file) and a real Envoy bootstrapped for the pool. Everything is
stopped on exit, also when the test failed. :func:`steady_load` sends streaming completions
through Envoy at a fixed rate, bounded in count and per-request time; :class:`WeightLog`
samples Envoy's weights meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from support.emulators import Pod, free_port
from trimtab import tasks
from trimtab.api.validation import parse_pool
from trimtab.targets.bootstrap import BootstrapOptions, build_bootstrap, clusters_from_pools
from trimtab_lab.emulator.fleet import DEFAULT_MODEL, emulate
from trimtab_lab.emulator.server import ReplicaServer
from trimtab_lab.envoy import EnvoyProcess

__all__ = [
    "CLUSTER",
    "NAMES",
    "TRIMTAB",
    "LocalStack",
    "Outcome",
    "WeightLog",
    "local_stack",
    "steady_load",
    "stream_one",
    "wait_for",
]

CLUSTER = "llama"
NAMESPACE = "default"
NAMES = ("vllm-0", "vllm-1", "vllm-2")
TRIMTAB = Path(sys.executable).parent / "trimtab"
#: As the e2e tests: weights react within seconds to a pinned load, and decay as fast.
FAST_POLICY: dict[str, Any] = {
    "slowStart": "0s",
    "kvLowWatermark": 0.1,
    "smoothing": "2s",
    "staleDecay": "2s",
}
_START_S = 30.0
_STOP_S = 10.0


async def wait_for(check: Any, *, what: str, timeout_s: float = 30.0, every_s: float = 0.1) -> Any:
    """Poll ``check()`` (sync or async) until truthy; fail naming ``what`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what} not seen within {timeout_s:g}s; last {result!r}")
        await asyncio.sleep(every_s)


@dataclass
class LocalStack:
    servers: tuple[ReplicaServer, ...]
    pods: list[Pod]
    workdir: Path
    pools_file: Path
    xds_port: int
    metrics_port: int
    envoy: EnvoyProcess | None = None
    trimtab: asyncio.subprocess.Process | None = None
    starts: int = 0
    url: str = ""
    _logs: list[Any] = field(default_factory=list)

    @property
    def status_file(self) -> Path:
        return self.workdir / "status.json"

    async def start_trimtab(self) -> None:
        """Start (or restart) ``trimtab run --local`` on the same ports and status file."""
        self.starts += 1
        log = (self.workdir / f"trimtab-{self.starts}.log").open("wb")
        self._logs.append(log)
        self.trimtab = await asyncio.create_subprocess_exec(
            str(TRIMTAB),
            *("run", "--local", str(self.pools_file), "--status-file", str(self.status_file)),
            *("--xds-port", str(self.xds_port), "--metrics-port", str(self.metrics_port)),
            stdout=log,
            stderr=log,
        )

    def kill_trimtab(self) -> None:
        assert self.trimtab is not None and self.trimtab.returncode is None
        self.trimtab.kill()

    async def reap_trimtab(self) -> None:
        if self.trimtab is not None:
            if self.trimtab.returncode is None:
                self.trimtab.kill()
            await asyncio.wait_for(self.trimtab.wait(), timeout=_STOP_S)

    def log_text(self) -> str:
        return "".join(
            path.read_text(errors="replace") for path in sorted(self.workdir.glob("trimtab-*.log"))
        )

    def status(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}
        pool: dict[str, Any] = data.get(f"{NAMESPACE}/{CLUSTER}", {})
        return pool

    def status_weights(self) -> dict[str, int]:
        return {row["name"]: row["weight"] for row in self.status().get("pods", [])}

    def condition(self, kind: str) -> dict[str, Any]:
        found = [c for c in self.status().get("conditions", []) if c.get("type") == kind]
        return found[0] if found else {}

    async def envoy_weights(self) -> dict[str, int]:
        """Weight per pod name as Envoy holds it now (admin ``/clusters``)."""
        assert self.envoy is not None
        by_address = await self.envoy.host_weights(CLUSTER)
        names = {f"{p.ip}:{p.port}": p.name for p in self.pods}
        return {names.get(address, address): weight for address, weight in by_address.items()}

    def unequal(self) -> dict[str, int] | None:
        """The status weights once pod 0 has less than half of every other pod's weight."""
        weights = self.status_weights()
        if len(weights) == len(NAMES) and all(
            weights[NAMES[0]] * 2 < weights[name] for name in NAMES[1:]
        ):
            return weights
        return None


def _pool(pods: list[Pod], *, interval: str, stale_after: str) -> dict[str, Any]:
    return {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": CLUSTER, "namespace": NAMESPACE},
        "spec": {
            "engine": "vllm",
            "endpoints": [{"name": p.name, "address": p.ip, "port": p.port} for p in pods],
            "metrics": {"source": "direct", "interval": interval, "staleAfter": stale_after},
            "policy": FAST_POLICY,
            "targets": [{"envoy": {"cluster": CLUSTER}}],
        },
    }


@contextlib.asynccontextmanager
async def local_stack(
    workdir: Path, *, interval: str = "500ms", stale_after: str = "3s"
) -> AsyncIterator[LocalStack]:
    """Replicas, trimtab and Envoy, up and holding a first decision."""
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    async with contextlib.AsyncExitStack() as cleanup:
        fleet = await cleanup.enter_async_context(emulate(replicas=len(NAMES)))
        pods = [
            Pod(name=name, ip="127.0.0.1", port=port)
            for name, port in zip(NAMES, fleet.ports, strict=True)
        ]
        pool = _pool(pods, interval=interval, stale_after=stale_after)
        pools_file = workdir / "pools.yaml"
        pools_file.write_text(yaml.safe_dump(pool))
        stack = LocalStack(
            servers=fleet.servers,
            pods=pods,
            workdir=workdir,
            pools_file=pools_file,
            xds_port=free_port(hosts=["127.0.0.1"]),
            metrics_port=free_port(hosts=["127.0.0.1"]),
        )
        cleanup.callback(lambda: [log.close() for log in stack._logs])
        cleanup.push_async_callback(stack.reap_trimtab)
        await stack.start_trimtab()
        await wait_for(
            lambda: len(stack.status_weights()) == len(NAMES) or _exited(stack),
            what="a first decision",
            timeout_s=_START_S,
        )
        assert stack.trimtab is not None and stack.trimtab.returncode is None, stack.log_text()
        options = BootstrapOptions(
            clusters=clusters_from_pools([parse_pool(pool)]),
            xds_port=stack.xds_port,
            listener_address="127.0.0.1",
            listener_port=0,
            admin_port=0,
            node_id="fault-envoy",
        )
        stack.envoy = EnvoyProcess(bootstrap=build_bootstrap(options), workdir=workdir / "envoy")
        cleanup.push_async_callback(stack.envoy.stop)
        await stack.envoy.start()

        async def hosts() -> bool:
            return len(await stack.envoy_weights()) == len(NAMES)

        await wait_for(hosts, what="Envoy holding every replica", timeout_s=_START_S)
        stack.url = f"http://127.0.0.1:{await stack.envoy.listener_port()}/v1/completions"
        yield stack


def _exited(stack: LocalStack) -> bool:
    return stack.trimtab is not None and stack.trimtab.returncode is not None


@dataclass(frozen=True)
class Outcome:
    sent_at: float
    """Seconds since the load started."""
    ok: bool
    detail: str


async def stream_one(client: httpx.AsyncClient, url: str, *, sent_at: float) -> Outcome:
    """One streamed completion; ok only with a 200 and the stream's ``[DONE]``."""
    body = {"model": DEFAULT_MODEL, "prompt_tokens": 200, "max_tokens": 24, "stream": True}
    try:
        async with client.stream("POST", url, json=body) as response:
            data = b"".join([chunk async for chunk in response.aiter_bytes()])
            if response.status_code != httpx.codes.OK:
                return Outcome(sent_at, False, f"HTTP {response.status_code}")
            if b"[DONE]" not in data:
                return Outcome(sent_at, False, "stream broken")
            return Outcome(sent_at, True, "ok")
    except httpx.HTTPError as exc:
        return Outcome(sent_at, False, type(exc).__name__)


async def steady_load(
    url: str, *, rate_per_s: float, count: int, at: dict[float, Any] | None = None
) -> list[Outcome]:
    """``count`` streaming requests at ``rate_per_s``; ``at`` maps seconds to a callable run
    (awaited if async) once that moment has passed, between two sends."""
    pending = dict(sorted((at or {}).items()))
    loop = asyncio.get_running_loop()
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=0)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0)) as client:
        start = loop.time()
        flights = []
        for index in range(count):
            await asyncio.sleep(max(0.0, start + index / rate_per_s - loop.time()))
            elapsed = loop.time() - start
            for moment in [m for m in pending if m <= elapsed]:
                result = pending.pop(moment)()
                if asyncio.iscoroutine(result):
                    await result
            flights.append(
                tasks.start(
                    stream_one(client, url, sent_at=loop.time() - start), name=f"req {index}"
                )
            )
        return list(await asyncio.gather(*flights))


class WeightLog:
    """Envoy's weights every ``every_s`` while running: ``(seconds since start, weights)``."""

    def __init__(self, stack: LocalStack, *, every_s: float = 0.1) -> None:
        self.samples: list[tuple[float, dict[str, int]]] = []
        self._stack = stack
        self._every_s = every_s
        self._task: asyncio.Task[None] | None = None
        self.started = 0.0

    async def __aenter__(self) -> WeightLog:
        self.started = asyncio.get_running_loop().time()
        self._task = tasks.start(self._run(), name="sampling Envoy weights")
        return self

    async def __aexit__(self, *exc: object) -> None:
        await tasks.stop(self._task)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            with contextlib.suppress(httpx.HTTPError):
                weights = await self._stack.envoy_weights()
                self.samples.append((loop.time() - self.started, weights))
            await asyncio.sleep(self._every_s)
