"""xDS push benchmark: push-to-applied latency and the server's CPU cost, with the real Envoy.

1. Latency: one pool of 8 pods; change one weight, poll Envoy's admin /clusters until it shows
   the new weight; repeat ``--pushes`` times; report p50/p99 (includes admin polling at 1 ms).
2. Load: ``--pools`` pools x ``--pods`` pods, every pool gets a new decision every second for
   ``--seconds`` seconds while one Envoy is connected; report this process's CPU seconds per
   wall second (time.process_time: cache, snapshot building and gRPC serving together).

    .venv/bin/python benchmarks/xds_push.py --pushes 200 --pools 100 --pods 64 --seconds 20
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.bootstrap import BootstrapCluster, BootstrapOptions, build_bootstrap
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import XdsServer
from trimtab_lab.envoy import EnvoyProcess


def _spec(cluster: str) -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "endpoints": [{"name": "x", "address": "10.0.0.1", "port": 8000}],
            "targets": [{"envoy": {"cluster": cluster}}],
        }
    )


def _endpoints(pods: int, pool: int) -> dict[PodName, Endpoint]:
    return {
        PodName(f"p{i}"): Endpoint(PodName(f"p{i}"), f"10.{pool // 250}.{pool % 250}.{i + 1}", 8000)
        for i in range(pods)
    }


def _decision(weights: list[int]) -> Decision:
    return Decision(
        pods=tuple(
            PodDecision(PodName(f"p{i}"), w, 64, PodState.SERVING, "bench")
            for i, w in enumerate(weights)
        )
    )


async def _latency(envoy: EnvoyProcess, cache: SnapshotCache, pushes: int) -> list[float]:
    target = EnvoyXdsTarget(cache=cache, cluster="pool-0")
    spec, endpoints = _spec("pool-0"), _endpoints(8, 0)
    pool = PoolKey("bench", "pool-0")
    samples = []
    for n in range(pushes):
        weights = [100] * 8
        weights[n % 8] = 101 + n
        started = time.perf_counter()
        await target.apply(pool=pool, spec=spec, decision=_decision(weights), endpoints=endpoints)
        wanted = f"10.0.0.{n % 8 + 1}:8000"
        for _ in range(5000):  # bounded poll
            if (await envoy.host_weights("pool-0")).get(wanted) == weights[n % 8]:
                break
            await asyncio.sleep(0.001)
        samples.append(time.perf_counter() - started)
    return samples


async def _load(cache: SnapshotCache, pools: int, pods: int, seconds: int) -> tuple[float, int]:
    rng = random.Random(1)
    targets = [EnvoyXdsTarget(cache=cache, cluster=f"pool-{p}") for p in range(1, pools + 1)]
    specs = [_spec(f"pool-{p}") for p in range(1, pools + 1)]
    endpoints = [_endpoints(pods, p) for p in range(1, pools + 1)]
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for second in range(seconds):
        tick = wall_start + second
        # Spread the pools over the second, as independent per-pool loops would.
        for p, target in enumerate(targets):
            await asyncio.sleep(max(0.0, tick + p / pools - time.perf_counter()))
            weights = [rng.randint(1, 1000) for _ in range(pods)]
            await target.apply(
                pool=PoolKey("bench", f"pool-{p + 1}"),
                spec=specs[p],
                decision=_decision(weights),
                endpoints=endpoints[p],
            )
    await asyncio.sleep(max(0.0, wall_start + seconds - time.perf_counter()))
    cpu = time.process_time() - cpu_start
    wall = time.perf_counter() - wall_start
    return cpu / wall, pools * seconds


async def main(args: argparse.Namespace) -> None:
    cache = SnapshotCache()
    server = XdsServer(cache=cache)
    port = await server.start(host="127.0.0.1", port=0)
    clusters = tuple(BootstrapCluster(name=f"pool-{p}") for p in range(args.pools + 1))
    options = BootstrapOptions(
        clusters=clusters,
        xds_port=port,
        listener_address="127.0.0.1",
        listener_port=0,
        admin_port=0,
    )
    with tempfile.TemporaryDirectory() as workdir:
        envoy = EnvoyProcess(bootstrap=build_bootstrap(options), workdir=Path(workdir))
        await EnvoyXdsTarget(cache=cache, cluster="pool-0").apply(
            pool=PoolKey("bench", "pool-0"),
            spec=_spec("pool-0"),
            decision=_decision([100] * 8),
            endpoints=_endpoints(8, 0),
        )
        cache.open()
        try:
            await envoy.start()
            samples = sorted(await _latency(envoy, cache, args.pushes))
            cpu, updates = await _load(cache, args.pools, args.pods, args.seconds)
            streams = cache.acks.streams()
            acked = streams[0].types if streams else {}
        finally:
            await envoy.stop()
            await server.stop(grace=0)
    p50 = statistics.median(samples) * 1000
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1000
    print(f"push-to-applied over {len(samples)} pushes: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    print(
        f"load: {args.pools} pools x {args.pods} pods, {updates} updates in {args.seconds} s: "
        f"server CPU {cpu:.3f} s per s ({cpu * 100:.1f} % of one core)"
    )
    print(
        "Envoy still connected and acknowledging:",
        {t.rsplit(".", 1)[-1]: s.acked_version for t, s in acked.items()},
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=200)
    parser.add_argument("--pools", type=int, default=100)
    parser.add_argument("--pods", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
