"""Rogue xDS clients cannot grow the server's memory without bound.

The server runs in a subprocess with a big snapshot (25 pools x 500 pods, ~1.2 MB of
endpoints). ``never-reads``: a client subprocess opens 300 ADS streams, subscribes each to
every cluster, then stops itself (SIGSTOP), so no response is ever read and every write stays
in flight. ``floods-requests``: 300 streams each send 40 requests of ~200 kB and read nothing.
Asserted: the server's RSS stays below 400 MB (measured: 195 and 258 MB; before the stream,
request-size and queue limits the same attacks reached 1.1 GB and 3.5 GB in 12 s), and once
the rogue process is gone a good client is served again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

from trimtab.targets.xds.snapshots import CLUSTER_TYPE, ENDPOINT_TYPE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

POOLS, PODS, STREAMS = 25, 500, 300
RSS_BOUND_MB = 400
_WATCH_S = 12

_SERVER = """
import asyncio, sys
from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import XdsServer
from trimtab.targets.xds.snapshots import build_pool_resources

async def main(pools, pods):
    cache = SnapshotCache()
    for p in range(pools):
        spec = InferencePoolSpec.model_validate({
            "endpoints": [{"name": "x", "address": "10.0.0.1", "port": 8000}],
            "targets": [{"envoy": {"cluster": f"c{p}"}}],
        })
        names = [PodName(f"pod-{i}") for i in range(pods)]
        endpoints = {
            n: Endpoint(n, f"10.{p}.{i // 250}.{i % 250 + 1}", 8000) for i, n in enumerate(names)
        }
        decision = Decision(pods=tuple(
            PodDecision(n, 100 + i, 64, PodState.SERVING, "big") for i, n in enumerate(names)
        ))
        cache.set_pool(build_pool_resources(
            pool=PoolKey("ns", f"p{p}"), cluster=f"c{p}", spec=spec, decision=decision,
            endpoints=endpoints,
        ))
    cache.open()
    server = XdsServer(cache=cache)
    print(await server.start(host="127.0.0.1", port=0), flush=True)
    await asyncio.Event().wait()

asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
"""

_ROGUE = """
import asyncio, os, signal, sys
import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

async def main(port, streams, pools, flood):
    names = [f"c{p}" for p in range(pools)]
    calls = []
    async def attack(index):
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        calls.append((channel, call))
        request = discovery_pb2.DiscoveryRequest(
            node=base_pb2.Node(id=f"rogue-{index}"), type_url=EDS, resource_names=names
        )
        try:
            await asyncio.wait_for(call.write(request), 10)
            for round in range(flood):
                junk = [f"{round}-{j}-" + "x" * 90 for j in range(2000)]
                await asyncio.wait_for(call.write(discovery_pb2.DiscoveryRequest(
                    type_url=EDS, resource_names=names + junk)), 10)
        except Exception:
            pass  # refused, or the server stopped reading: both are the point
    await asyncio.wait_for(asyncio.gather(*(attack(i) for i in range(streams))), 60)
    print("attacked", flush=True)
    if not flood:
        os.kill(os.getpid(), signal.SIGSTOP)  # read nothing, ever
    await asyncio.sleep(600)

asyncio.run(main(*map(int, sys.argv[1:])))
"""


def _rss_mb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def _process(*argv: str) -> Iterator[subprocess.Popen[str]]:
    process = subprocess.Popen(
        [sys.executable, *argv], stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
    )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
            os.kill(process.pid, signal.SIGCONT)
        process.wait(timeout=10)


def _line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line, f"process {process.args!r} exited with {process.poll()}"
    return line


async def _served(port: int) -> bool:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel).StreamAggregatedResources()
        await call.write(
            discovery_pb2.DiscoveryRequest(node=base_pb2.Node(id="good"), type_url=CLUSTER_TYPE)
        )
        response = await asyncio.wait_for(call.read(), timeout=10)
        call.cancel()
        return len(response.resources) == POOLS


@pytest.mark.parametrize("flood", [0, 40], ids=["never-reads", "floods-requests"])
async def test_rogue_streams_do_not_grow_memory_without_bound(flood: int) -> None:
    with _process("-c", _SERVER, str(POOLS), str(PODS)) as server:
        port = int(await asyncio.to_thread(_line, server))
        before = _rss_mb(server.pid)
        peak = before
        with _process("-c", _ROGUE, str(port), str(STREAMS), str(POOLS), str(flood)) as rogue:
            await asyncio.to_thread(_line, rogue)
            for _ in range(_WATCH_S * 4):  # bounded watch of the server under attack
                peak = max(peak, _rss_mb(server.pid))
                await asyncio.sleep(0.25)
        print(f"{ENDPOINT_TYPE.rsplit('.', 1)[-1]} x {STREAMS} streams: RSS {before} -> {peak} MB")
        assert peak < RSS_BOUND_MB
        for _ in range(50):  # bounded: the server notices the dead client's streams at once
            with contextlib.suppress(grpc.aio.AioRpcError, TimeoutError):
                if await _served(port):
                    break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the server never served a good client after the attack")
