"""Time ``Admission.ask`` + ``release`` and measure the memory of a queued request.

A benchmark, not a test: wall-clock numbers depend on the machine. Four measurements:

1. ask+release pairs on a pool half full (every pod has room, fresh KV snapshots), for 10 and
   for 1,000 pods: the cost should grow like log(pods), not like pods;
2. the same with the pool full and a deep queue: each release hands its slot to the head;
3. the worst case for choosing: every pod has a free slot but no KV room for the request, so
   the search ends in a linear scan (the ask then queues);
4. bytes per queued request (tracemalloc, the Ask object included), 10,000 requests queued.

Run: ``.venv/bin/python benchmarks/bench_admission.py [--pods N] [--pairs P]``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    Ask,
    Grant,
    PodCapacity,
    Queued,
    RequestId,
)
from trimtab.api.records import PodName


def pool(*, size: int, cap: int, kv_usage: float = 0.2) -> list[PodCapacity]:
    return [
        PodCapacity(
            name=PodName(f"pod-{i}"),
            address=f"10.{i // 250}.{i % 250}.1:8000",
            cap=cap,
            speed=1.0 if i % 10 else 0.5,
            kv_usage=kv_usage,
            kv_observed_at=0.0,
            kv_capacity_tokens=400_000,
        )
        for i in range(size)
    ]


def percentiles(samples: list[float]) -> str:
    samples.sort()
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return f"median {statistics.median(samples):6.1f} µs, p99 {p99:6.1f} µs"


def time_pairs(*, size: int, pairs: int, full: bool) -> tuple[list[float], list[float]]:
    """Per-call µs of ask and of release, in steady state."""
    cap = 8
    admission = Admission(settings=AdmissionSettings(queue_length=100_000, stale_after_s=3600.0))
    admission.set_pods(pods=pool(size=size, cap=cap), now=0.0)
    live: list[RequestId] = []
    preload = size * cap + size if full else size * cap // 2
    for i in range(preload):
        answer = admission.ask(ask=Ask(id=RequestId(f"pre{i}"), prompt_tokens=500), now=1.0)
        if isinstance(answer, Grant | Queued):
            live.append(answer.id)
    asks, releases = [], []
    gc.collect()
    for i in range(pairs):
        request = Ask(id=RequestId(f"r{i}"), prompt_tokens=500 + (i % 7) * 300)
        start = time.perf_counter()
        admission.ask(ask=request, now=1.0)
        middle = time.perf_counter()
        admission.release(id=live[i], now=1.0, output_tokens=200)
        end = time.perf_counter()
        live.append(request.id)
        asks.append((middle - start) * 1e6)
        releases.append((end - middle) * 1e6)
    return asks, releases


def time_kv_bound(*, size: int, rounds: int) -> list[float]:
    """µs of an ask that no pod can take for KV (every pod has count room)."""
    admission = Admission(settings=AdmissionSettings(stale_after_s=3600.0, queue_length=0))
    admission.set_pods(pods=pool(size=size, cap=8, kv_usage=0.88), now=0.0)
    for i in range(size):
        admission.ask(ask=Ask(id=RequestId(f"pre{i}"), prompt_tokens=10), now=1.0)
    samples = []
    for i in range(rounds):
        request = Ask(id=RequestId(f"big{i}"), prompt_tokens=20_000)
        start = time.perf_counter()
        admission.ask(ask=request, now=1.0)
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def bytes_per_queued(*, queued: int) -> float:
    admission = Admission(settings=AdmissionSettings(queue_length=queued))
    admission.set_pods(pods=pool(size=10, cap=1), now=0.0)
    for i in range(10):
        admission.ask(ask=Ask(id=RequestId(f"pre{i}"), prompt_tokens=10), now=1.0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(queued):
        admission.ask(ask=Ask(id=RequestId(f"queued-{i:08d}"), prompt_tokens=1000), now=1.0)
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert admission.stats().queue_length == queued
    return (after - before) / queued


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=20_000)
    args = parser.parse_args()
    for full in (False, True):
        label = "full pool, queue served on release" if full else "pool half full"
        for size in (10, args.pods):
            asks, releases = time_pairs(size=size, pairs=args.pairs, full=full)
            print(
                f"{label:36} {size:5} pods: ask {percentiles(asks)}; "
                f"release {percentiles(releases)}"
            )
    small = statistics.median(time_kv_bound(size=10, rounds=2000))
    large = time_kv_bound(size=args.pods, rounds=500)
    print(
        f"{'no KV room anywhere (worst case)':36} {args.pods:5} pods: ask {percentiles(large)}"
        f" ({statistics.median(large) / small:.0f}x the 10-pod median)"
    )
    print(f"memory: {bytes_per_queued(queued=10_000):.0f} bytes per queued request (Ask included)")


if __name__ == "__main__":
    main()
