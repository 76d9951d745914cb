"""Time ``compute_decision`` on a large pool (design target: 1,000 pods well under 50 ms).

A benchmark, not a test: wall-clock numbers depend on the machine. Pods get varied, partly
stale, partly warming and partly preempting metrics, and each decision feeds the next, as in the
controller loop. Run: ``.venv/bin/python benchmarks/bench_policy.py [--pods N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from trimtab.api.records import Decision, PodInput, PodName, PodSample
from trimtab.policy import PolicySettings, compute_decision


def build_pool(*, size: int, rng: random.Random) -> list[PodInput]:
    pods = []
    for i in range(size):
        sample = PodSample(
            running=rng.uniform(0, 64),
            waiting=rng.choice([0.0, 0.0, 0.0, rng.uniform(0, 20)]),
            kv_usage=rng.random(),
            preemption_rate=rng.choice([0.0] * 20 + [3.0]),
            age_s=rng.choice([1.0] * 20 + [30.0]),
        )
        ready = rng.choice([1e6] * 10 + [rng.uniform(0, 60)])
        pods.append(PodInput(name=PodName(f"pod-{i}"), ready_for_s=ready, sample=sample))
    return pods


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    rng = random.Random(1)
    settings = PolicySettings(adaptive_caps=True)
    previous: Decision | None = None
    timings = []
    for _ in range(args.rounds):
        pods = build_pool(size=args.pods, rng=rng)
        start = time.perf_counter()
        previous = compute_decision(pods=pods, previous=previous, settings=settings, elapsed_s=2.0)
        timings.append((time.perf_counter() - start) * 1000.0)
    timings.sort()
    print(
        f"{args.pods} pods, {args.rounds} rounds: median {statistics.median(timings):.1f} ms, "
        f"p95 {timings[int(0.95 * (len(timings) - 1))]:.1f} ms, max {timings[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
