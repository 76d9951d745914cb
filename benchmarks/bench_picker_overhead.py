"""The picker's cost on the request path and per queued request, on real processes.

A benchmark, not a test: figures depend on the machine. Two measurements in one run:

1. **Added latency.** Two Envoys (``--concurrency 1``) in front of the same trivial upstream
   (HTTP/1.1, a 2-byte answer at once, non-streaming): one plain (a static cluster), one from
   ``build_bootstrap(picker=...)`` calling the real ``trimtab run --local --picker-port`` over
   ext_proc for a pool with ``admission.mode: picker``. Requests alternate between the two on
   one open-loop schedule, ``--rate`` per second to each, over keep-alive connections, so both
   see the same machine at the same moments. trimtab runs under ``taskset`` on one core; the
   Envoys, the upstream and this load generator share the other. Reported: p50/p99/p99.9 of each
   path and the differences (the picker's added latency: one ext_proc round trip for request
   headers, the response-headers message and the stream's end).
2. **Memory per queued request.** A second pool (cap 1, its one slot held by a stream that
   never ends) gets ``--queued`` ext_proc streams straight from this process over gRPC; all of
   them wait in the picker's queue (trimtab's ``trimtab_picker_queue_length``). Reported:
   trimtab's RSS growth per queued request (least squares over the steps), which counts the
   gRPC stream, the asyncio task and the admission entry together.

Everything listens on 127.0.0.1; every process stops on exit.
Run: ``.venv/bin/python benchmarks/bench_picker_overhead.py [--rate 200] [--seconds 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import httpx
import numpy as np
import yaml
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from trimtab.api.validation import parse_pool
from trimtab.picker.protocol import POOL_HEADER
from trimtab.targets.bootstrap import (
    PICKER_CLUSTER,
    BootstrapCluster,
    BootstrapOptions,
    PickerOptions,
    build_bootstrap,
    clusters_from_pools,
)
from trimtab_lab.demo.stack import free_ports
from trimtab_lab.envoy import EnvoyProcess
from trimtab_lab.processes import ComponentFailed, ProcessGroup

RESULTS = Path(__file__).resolve().parent / "results" / "picker-overhead.md"
_CLI = "from trimtab.commands.main import main; main()"
PICKED = "picked"
QUEUED = "queued"
# The picker's core, and the core of everything else (Envoys, upstream, load generator).
PICKER_CPU = 1
OTHER_CPU = 0
_BODY = json.dumps({"model": "m", "prompt": "x" * 64, "max_tokens": 1}).encode()
_HEALTHY = {"eds_health_status": "HEALTHY"}
# An idle vLLM: KV size from cache_config_info, so admission's KV budget is active.
_METRICS = (
    b'vllm:num_requests_running{model_name="m"} 0\n'
    b'vllm:num_requests_waiting{model_name="m"} 0\n'
    b'vllm:kv_cache_usage_perc{model_name="m"} 0.0\n'
    b'vllm:num_preemptions_total{model_name="m"} 0\n'
    b'vllm:cache_config_info{block_size="16",num_gpu_blocks="25000"} 1.0\n'
)


# --- the trivial upstream (run as a child: ``--serve-upstream PORT``) -----------------------


class _Upstream(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._buffer = b""

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        while True:
            head_end = self._buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self._buffer[:head_end].decode("latin-1")
            found = re.search(r"(?im)^content-length:\s*(\d+)", head)
            length = int(found.group(1)) if found else 0
            if len(self._buffer) < head_end + 4 + length:
                return
            self._buffer = self._buffer[head_end + 4 + length :]
            body = _METRICS if head.split(" ", 2)[1] == "/metrics" else b"ok"
            self._transport.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )


async def _serve_upstream(port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Upstream, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


# --- a minimal keep-alive HTTP/1.1 client (httpx's own cost would dwarf a millisecond) -------


class _Connections:
    def __init__(self, *, port: int, path: str) -> None:
        self._port = port
        self._request = (
            f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(_BODY)}\r\n\r\n"
        ).encode() + _BODY
        self._idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        self._all: list[asyncio.StreamWriter] = []

    async def send(self) -> tuple[int, float]:
        """One request; (status, seconds from write to the whole answer read)."""
        if self._idle:
            reader, writer = self._idle.pop()
        else:
            reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
            self._all.append(writer)
        began = time.perf_counter()
        writer.write(self._request)
        head = await reader.readuntil(b"\r\n\r\n")
        found = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        await reader.readexactly(int(found.group(1)) if found else 0)
        took = time.perf_counter() - began
        self._idle.append((reader, writer))
        return int(head.split(b" ", 2)[1]), took

    async def close(self) -> None:
        for writer in self._all:
            writer.close()


async def _drive(
    *, paths: Sequence[_Connections], rate: float, seconds: float
) -> list[list[float]]:
    """Alternate requests between ``paths`` at ``rate`` per second each; latencies per path."""
    loop = asyncio.get_running_loop()
    count = round(rate * seconds) * len(paths)
    gap = 1.0 / (rate * len(paths))
    latencies: list[list[float]] = [[] for _ in paths]
    failures = [0 for _ in paths]
    start = loop.time() + 0.1

    async def one(index: int) -> None:
        path = index % len(paths)
        await asyncio.sleep(max(0.0, start + index * gap - loop.time()))
        try:
            status, took = await asyncio.wait_for(paths[path].send(), timeout=10.0)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            failures[path] += 1
            return
        if status == 200:
            latencies[path].append(took)
        else:
            failures[path] += 1

    await asyncio.gather(*(one(i) for i in range(count)))
    if any(failures):
        raise ComponentFailed(f"requests failed per path: {failures}")
    return latencies


# --- the stack ---------------------------------------------------------------------------


def _pin_all_threads(pid: int, cpu: int) -> None:
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), {cpu})


def _pools(upstream: int) -> list[dict[str, Any]]:
    endpoint = [{"name": "upstream", "address": "127.0.0.1", "port": upstream}]

    def pool(name: str, *, policy: dict[str, Any], admission: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "trimtab.io/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"namespace": "bench", "name": name},
            "spec": {
                "endpoints": endpoint,
                "engine": "vllm",
                "metrics": {"source": "direct", "interval": "500ms"},
                "policy": {"slowStart": "0s", **policy},
                "admission": {"mode": "picker", **admission},
                "targets": [{"envoy": {"cluster": name}}],
            },
        }

    return [
        pool(PICKED, policy={}, admission={}),
        pool(
            QUEUED,
            policy={"maxInFlightPerPod": 1, "minInFlightPerPod": 1},
            admission={"queueLength": 100_000, "queueTtl": "10m", "retryAfter": "1s"},
        ),
    ]


def _plain_bootstrap(*, listener: int, upstream: int) -> dict[str, Any]:
    options = BootstrapOptions(
        clusters=(BootstrapCluster(name=PICKED),),
        listener_address="127.0.0.1",
        listener_port=listener,
        admin_port=0,
        eds_dir=".",
    )
    bootstrap = build_bootstrap(options)
    address = {"socket_address": {"address": "127.0.0.1", "port_value": upstream}}
    bootstrap["static_resources"]["clusters"] = [
        {
            "name": PICKED,
            "type": "STATIC",
            "connect_timeout": "1s",
            "lb_policy": "LEAST_REQUEST",
            "load_assignment": {
                "cluster_name": PICKED,
                "endpoints": [{"lb_endpoints": [{"endpoint": {"address": address}}]}],
            },
        }
    ]
    return bootstrap


async def _wait_healthy(envoy: EnvoyProcess, cluster: str, *, within_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while loop.time() < deadline:
        data = (await envoy.client.get(f"{envoy.admin_url}/clusters?format=json")).json()
        for status in data.get("cluster_statuses", []):
            hosts = status.get("host_statuses", [])
            healthy = all(h.get("health_status") == _HEALTHY for h in hosts)
            if status["name"] == cluster and hosts and healthy:
                return
        await asyncio.sleep(0.1)
    raise ComponentFailed(f"envoy: cluster {cluster!r} not healthy within {within_s:.0f}s")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ComponentFailed(f"no VmRSS for pid {pid}")


async def _metric(client: httpx.AsyncClient, url: str, name: str, pool: str) -> float:
    text = (await client.get(url)).text
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and f'pool="{pool}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _queue_memory(
    *, picker_port: int, metrics_url: str, pid: int, steps: Sequence[int]
) -> list[tuple[int, int]]:
    """(queued requests, trimtab RSS bytes) at each step of ``steps`` (cumulative counts)."""
    channels = []
    calls: list[Any] = []
    headers = ext_proc.HttpHeaders(
        headers=base_pb2.HeaderMap(
            headers=[
                base_pb2.HeaderValue(key=":method", raw_value=b"POST"),
                base_pb2.HeaderValue(key=":path", raw_value=b"/v1/completions"),
                base_pb2.HeaderValue(key="content-length", raw_value=b"400"),
            ]
        )
    )

    async def open_stream() -> Any:
        # A channel per 200 streams: HTTP/2 peers may cap concurrent streams per connection.
        if len(calls) % 200 == 0:
            channels.append(grpc.aio.insecure_channel(f"127.0.0.1:{picker_port}"))
        stub = external_processor_pb2_grpc.ExternalProcessorStub(channels[-1])
        call = stub.Process(metadata=((POOL_HEADER, QUEUED),))
        calls.append(call)
        await call.write(ext_proc.ProcessingRequest(request_headers=headers))
        return call

    points: list[tuple[int, int]] = []
    async with httpx.AsyncClient(timeout=5.0) as client:
        holder = await open_stream()
        await holder.read()  # the grant: the pool's one slot is now taken until the end
        for target in steps:
            while len(calls) - 1 < target:
                # A stream the server cancels is not queued; the metric below says what is.
                with contextlib.suppress(grpc.aio.AioRpcError):
                    await open_stream()
            # Until the queue stops growing (bounded): the x of each point is what is queued.
            queued, previous = 0.0, -1.0
            for _ in range(60):
                queued = await _metric(client, metrics_url, "trimtab_picker_queue_length", QUEUED)
                if queued >= target or queued == previous:
                    break
                previous = queued
                await asyncio.sleep(0.5)
            if queued < target * 0.9:
                raise ComponentFailed(f"only {queued:.0f} of {target} requests queued")
            await asyncio.sleep(1.0)  # let allocations settle
            points.append((int(queued), _rss_bytes(pid)))
    for call in calls:
        call.cancel()
    for channel in channels:
        await channel.close()
    return points


async def _main(*, rate: float, seconds: float, steps: Sequence[int], workdir: Path) -> str:
    os.sched_setaffinity(0, {OTHER_CPU})
    upstream, listener_plain, listener_picked, xds, metrics, picker = free_ports(6)
    pools = _pools(upstream)
    pools_path = workdir / "pools.yaml"
    pools_path.write_text(yaml.safe_dump_all(pools, sort_keys=False))
    async with ProcessGroup(log_dir=workdir / "logs") as group:
        served = await group.start(
            name="upstream",
            argv=[
                *("taskset", "-c", str(OTHER_CPU), sys.executable, __file__),
                *("--serve-upstream", str(upstream)),
            ],
        )
        await group.wait_http(served, url=f"http://127.0.0.1:{upstream}/metrics", timeout_s=20)
        trimtab = await group.start(
            name="trimtab",
            argv=[
                *("taskset", "-c", str(PICKER_CPU), sys.executable, "-c", _CLI),
                *("run", "--local", str(pools_path), "--xds-port", str(xds)),
                *("--metrics-port", str(metrics), "--picker-port", str(picker)),
            ],
            env={"PYTHONUNBUFFERED": "1"},
        )
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        await group.wait_http(trimtab, url=metrics_url, timeout_s=30)
        plain = EnvoyProcess(
            bootstrap=_plain_bootstrap(listener=listener_plain, upstream=upstream),
            workdir=workdir / "envoy-plain",
            group=group,
        )
        picked_clusters = tuple(
            c for c in clusters_from_pools([parse_pool(p) for p in pools]) if c.name == PICKED
        )
        with_picker = EnvoyProcess(
            bootstrap=build_bootstrap(
                BootstrapOptions(
                    clusters=picked_clusters,
                    xds_port=xds,
                    listener_address="127.0.0.1",
                    listener_port=listener_picked,
                    admin_port=0,
                    node_id="bench",
                    picker=PickerOptions(host="127.0.0.1", port=picker, health_interval_s=0.5),
                )
            ),
            workdir=workdir / "envoy-picker",
            group=group,
        )
        connections = [
            _Connections(port=listener_plain, path="/v1/completions"),
            _Connections(port=listener_picked, path="/v1/completions"),
        ]
        try:
            for envoy in (plain, with_picker):
                await envoy.start(ready_within=30)
                _pin_all_threads(envoy.pid, OTHER_CPU)
            await _wait_healthy(with_picker, PICKED, within_s=30)
            await _wait_healthy(with_picker, PICKER_CLUSTER, within_s=30)
            # Warm both paths (connections, Envoy's first requests), then measure.
            await _drive(paths=connections, rate=rate, seconds=2.0)
            grants_before = await _grants(metrics_url)
            latencies = await _drive(paths=connections, rate=rate, seconds=seconds)
            grants = await _grants(metrics_url) - grants_before
            stats = await with_picker.stats("http.")
            rss_idle = _rss_bytes(trimtab.process.pid)
            points = await _queue_memory(
                picker_port=picker,
                metrics_url=metrics_url,
                pid=trimtab.process.pid,
                steps=steps,
            )
        finally:
            for each in connections:
                await each.close()
            for envoy in (plain, with_picker):
                await envoy.client.aclose()
    return _page(
        rate=rate,
        seconds=seconds,
        latencies=latencies,
        grants=grants,
        failed_open=sum(
            v for k, v in stats.items() if "ext_proc" in k and k.endswith(".failure_mode_allowed")
        ),
        rss_idle=rss_idle,
        points=points,
    )


async def _grants(metrics_url: str) -> float:
    async with httpx.AsyncClient(timeout=5.0) as client:
        return await _metric(client, metrics_url, "trimtab_picker_grants_total", PICKED)


def _page(
    *,
    rate: float,
    seconds: float,
    latencies: list[list[float]],
    grants: float,
    failed_open: int,
    rss_idle: int,
    points: list[tuple[int, int]],
) -> str:
    plain, picked = (np.array(values) * 1000 for values in latencies)
    quantiles = (50, 99, 99.9)
    a, b = np.percentile(plain, quantiles), np.percentile(picked, quantiles)
    counts, rss = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    slope = float(np.polyfit(counts, rss, 1)[0]) if len(points) > 1 else float("nan")
    steps = ", ".join(f"{n:,}: {(r - rss_idle) / 1e6:+.1f} MB" for n, r in points)
    lines = [
        "# Picker overhead",
        "",
        "Measured by `benchmarks/bench_picker_overhead.py` on the 2-core build machine, one",
        f"run, {time.strftime('%Y-%m-%d')}. trimtab (xDS + picker) under `taskset -c "
        f"{PICKER_CPU}`; both Envoys (`--concurrency 1`), the trivial upstream and the load "
        f"generator on core {OTHER_CPU}. Requests alternate between the two Envoys, "
        f"{rate:g}/s to each for {seconds:g} s, non-streaming, keep-alive; latency from the "
        "request's write to the whole answer read.",
        f"Command: `.venv/bin/python benchmarks/bench_picker_overhead.py --rate {rate:g} "
        f"--seconds {seconds:g}`",
        "",
        "| path | requests | p50 ms | p99 ms | p99.9 ms | mean ms |",
        "|---|---|---|---|---|---|",
        f"| Envoy, no ext_proc | {len(plain)} | {a[0]:.3f} | {a[1]:.3f} | {a[2]:.3f} | "
        f"{plain.mean():.3f} |",
        f"| Envoy + ext_proc to trimtab's picker | {len(picked)} | {b[0]:.3f} | {b[1]:.3f} | "
        f"{b[2]:.3f} | {picked.mean():.3f} |",
        f"| added by the picker | | {b[0] - a[0]:+.3f} | {b[1] - a[1]:+.3f} | "
        f"{b[2] - a[2]:+.3f} | {picked.mean() - plain.mean():+.3f} |",
        "",
        f"The picker granted {grants:.0f} of the {len(picked)} requests of its path during the "
        f"measurement; Envoy failed open on {failed_open} (ext_proc `failure_mode_allowed`).",
        "",
        "## Memory per queued request",
        "",
        f"trimtab's RSS with its pools idle: {rss_idle / 1e6:.1f} MB. Growth with N ext_proc "
        f"streams queued (a pool of cap 1, its slot held): {steps}.",
        f"Least-squares slope: **{slope:,.0f} bytes per queued request** (gRPC stream, asyncio "
        "task and admission entry together; the pure admission entry alone is 365 B, "
        "`benchmarks/bench_admission.py`). The queue is bounded by `queueLength` (default "
        f"1,024: about {slope * 1024 / 1e6:.1f} MB at this rate).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s to each path")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--queued", default="500,1000,2000", help="cumulative queue depths")
    parser.add_argument("--serve-upstream", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(_serve_upstream(args.serve_upstream))
        return
    steps = [int(n) for n in args.queued.split(",")]
    with tempfile.TemporaryDirectory(prefix="picker-overhead-") as folder:
        page = asyncio.run(
            _main(rate=args.rate, seconds=args.seconds, steps=steps, workdir=Path(folder))
        )
    RESULTS.write_text(page)
    print(page)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
