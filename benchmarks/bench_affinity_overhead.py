"""The picker's added latency when prefix affinity reads and hashes every prompt.

A benchmark, not a test: figures depend on the machine. The stack of
``benchmarks/bench_picker_overhead.py`` (its upstream, load generator and process placement:
trimtab under ``taskset`` on one core; Envoys, upstream and load generator on the other) with
three Envoys in front of the same trivial upstream: plain, through the picker for a pool with
affinity off (request headers only), and through the picker for a pool with
``admission.affinity.mode: prefix`` (the picker asks for the body, parses the chat JSON and
hashes its prompt into 512-token blocks before it picks). Every request carries the same
~8k-token chat body (32 KiB), ``--rate`` per second to each path, alternating on one open-loop
schedule. Reported: p50/p99/p99.9 of each path and the picker's added latency with and without
affinity. Writes ``benchmarks/results/affinity-overhead.md``.
Run: ``.venv/bin/python benchmarks/bench_affinity_overhead.py [--rate 200] [--seconds 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_picker_overhead as base
from trimtab.api.validation import parse_pool
from trimtab.targets.bootstrap import (
    PICKER_CLUSTER,
    BootstrapOptions,
    PickerOptions,
    build_bootstrap,
    clusters_from_pools,
)
from trimtab_lab.demo.stack import free_ports
from trimtab_lab.envoy import EnvoyProcess
from trimtab_lab.processes import ProcessGroup

RESULTS = Path(__file__).resolve().parent / "results" / "affinity-overhead.md"
PLAIN_POOL = "picked"
AFFINE_POOL = "affine"
PROMPT_TOKENS = 8192
_SYSTEM = "You are a helpful assistant. Answer briefly and cite the documents. "
_BODY = json.dumps(
    {
        "model": "m",
        "max_tokens": 1,
        "messages": [
            {"role": "system", "content": (_SYSTEM * 1000)[: PROMPT_TOKENS * 4 - 64]},
            {"role": "user", "content": "What does the third document say?"},
        ],
    }
).encode()


def _pools(upstream: int) -> list[dict[str, Any]]:
    endpoint = [{"name": "upstream", "address": "127.0.0.1", "port": upstream}]

    def pool(name: str, affinity: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": "trimtab.io/v1alpha1",
            "kind": "InferencePool",
            "metadata": {"namespace": "bench", "name": name},
            "spec": {
                "endpoints": endpoint,
                "engine": "vllm",
                "metrics": {"source": "direct", "interval": "500ms"},
                "policy": {"slowStart": "0s"},
                "admission": {"mode": "picker", "affinity": affinity},
                "targets": [{"envoy": {"cluster": name}}],
            },
        }

    return [pool(PLAIN_POOL, {"mode": "off"}), pool(AFFINE_POOL, {"mode": "prefix"})]


async def _main(*, rate: float, seconds: float, workdir: Path) -> str:
    os.sched_setaffinity(0, {base.OTHER_CPU})
    upstream, plain_port, picked_port, affine_port, xds, metrics, picker = free_ports(7)
    pools = _pools(upstream)
    pools_path = workdir / "pools.yaml"
    pools_path.write_text(yaml.safe_dump_all(pools, sort_keys=False))
    clusters = clusters_from_pools([parse_pool(p) for p in pools])
    async with ProcessGroup(log_dir=workdir / "logs") as group:
        served = await group.start(
            name="upstream",
            argv=[
                *("taskset", "-c", str(base.OTHER_CPU), sys.executable, base.__file__),
                *("--serve-upstream", str(upstream)),
            ],
        )
        await group.wait_http(served, url=f"http://127.0.0.1:{upstream}/metrics", timeout_s=20)
        trimtab = await group.start(
            name="trimtab",
            argv=[
                *("taskset", "-c", str(base.PICKER_CPU), sys.executable, "-c", base._CLI),
                *("run", "--local", str(pools_path), "--xds-port", str(xds)),
                *("--metrics-port", str(metrics), "--picker-port", str(picker)),
            ],
            env={"PYTHONUNBUFFERED": "1"},
        )
        await group.wait_http(trimtab, url=f"http://127.0.0.1:{metrics}/metrics", timeout_s=30)

        def through_picker(name: str, port: int) -> EnvoyProcess:
            return EnvoyProcess(
                bootstrap=build_bootstrap(
                    BootstrapOptions(
                        clusters=tuple(c for c in clusters if c.name == name),
                        xds_port=xds,
                        listener_address="127.0.0.1",
                        listener_port=port,
                        admin_port=0,
                        node_id=f"bench-{name}",
                        picker=PickerOptions(host="127.0.0.1", port=picker, health_interval_s=0.5),
                    )
                ),
                workdir=workdir / f"envoy-{name}",
                group=group,
            )

        envoys = [
            EnvoyProcess(
                bootstrap=base._plain_bootstrap(listener=plain_port, upstream=upstream),
                workdir=workdir / "envoy-plain",
                group=group,
            ),
            through_picker(PLAIN_POOL, picked_port),
            through_picker(AFFINE_POOL, affine_port),
        ]
        connections = []
        for port in (plain_port, picked_port, affine_port):
            each = base._Connections(port=port, path="/v1/chat/completions")
            each._request = (
                b"POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\n"
                b"content-type: application/json\r\n"
                + f"content-length: {len(_BODY)}\r\n\r\n".encode()
                + _BODY
            )
            connections.append(each)
        try:
            for envoy in envoys:
                await envoy.start(ready_within=30)
                base._pin_all_threads(envoy.pid, base.OTHER_CPU)
            for envoy, name in zip(envoys[1:], (PLAIN_POOL, AFFINE_POOL), strict=True):
                await base._wait_healthy(envoy, name, within_s=30)
                await base._wait_healthy(envoy, PICKER_CLUSTER, within_s=30)
            await base._drive(paths=connections, rate=rate, seconds=2.0)
            latencies = await base._drive(paths=connections, rate=rate, seconds=seconds)
            async with httpx.AsyncClient(timeout=5.0) as client:
                url = f"http://127.0.0.1:{metrics}/metrics"
                hits = await base._metric(
                    client, url, "trimtab_picker_prefix_hit_tokens_total", AFFINE_POOL
                )
                grants = await base._metric(client, url, "trimtab_picker_grants_total", AFFINE_POOL)
        finally:
            for each in connections:
                await each.close()
            for envoy in envoys:
                await envoy.client.aclose()
    return _page(rate=rate, seconds=seconds, latencies=latencies, hits=hits, grants=grants)


def _page(
    *, rate: float, seconds: float, latencies: list[list[float]], hits: float, grants: float
) -> str:
    plain, picked, affine = (np.array(values) * 1000 for values in latencies)
    quantiles = (50, 99, 99.9)
    rows = [np.percentile(each, quantiles) for each in (plain, picked, affine)]
    names = [
        "Envoy, no ext_proc",
        "Envoy + picker, affinity off (headers only)",
        "Envoy + picker, affinity prefix (body read and hashed)",
    ]
    lines = [
        "# Picker overhead with prefix affinity",
        "",
        f"Measured by `benchmarks/bench_affinity_overhead.py` on the 2-core build machine, one "
        f"run, {time.strftime('%Y-%m-%d')}: {rate:g} requests/s to each of three Envoys for "
        f"{seconds:g} s, each request a {len(_BODY):,}-byte chat body (~{PROMPT_TOKENS:,} "
        "prompt tokens at 4 characters a token), non-streaming, keep-alive. Process placement "
        "as in `benchmarks/results/picker-overhead.md`.",
        f"Command: `.venv/bin/python benchmarks/bench_affinity_overhead.py --rate {rate:g} "
        f"--seconds {seconds:g}`",
        "",
        "| path | requests | p50 ms | p99 ms | p99.9 ms | mean ms |",
        "|---|---|---|---|---|---|",
    ]
    for name, values, row in zip(names, (plain, picked, affine), rows, strict=True):
        lines.append(
            f"| {name} | {len(values)} | {row[0]:.3f} | {row[1]:.3f} | {row[2]:.3f} | "
            f"{values.mean():.3f} |"
        )
    for name, row, values in (
        ("added by the picker, affinity off", rows[1], picked),
        ("added by the picker, affinity prefix", rows[2], affine),
    ):
        lines.append(
            f"| {name} | | {row[0] - rows[0][0]:+.3f} | {row[1] - rows[0][1]:+.3f} | "
            f"{row[2] - rows[0][2]:+.3f} | {values.mean() - plain.mean():+.3f} |"
        )
    lines += [
        "",
        f"The affinity pool granted {grants:.0f} requests (warm-up included) and routed "
        f"{hits:,.0f} prompt tokens to the pod expected to hold them (one pod: every request "
        "after the first is a hit).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0, help="requests/s to each path")
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="affinity-overhead-") as folder:
        page = asyncio.run(_main(rate=args.rate, seconds=args.seconds, workdir=Path(folder)))
    RESULTS.write_text(page)
    print(page)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
