"""Cost of one admission ask with prefix affinity on, in-process (no I/O).

A benchmark, not a test: figures depend on the machine. For 10, 100 and 1,000 pods (cap 64,
400k-token KV each), 20,000 asks with 16-block prefixes drawn from 5,000 distinct prompts or
from one hot prompt every pod ends up holding (the worst case: the index walk visits every
holder), releases keeping about 8 requests per pod in flight. Prints p50/p99 per ask and the
pick reasons. Run: ``.venv/bin/python benchmarks/bench_affinity_admission.py``.
"""

from __future__ import annotations

import random
import time

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    AffinityMode,
    Ask,
    PodCapacity,
    RequestId,
)
from trimtab.api.records import PodName

ASKS = 20_000


def measure(*, pods: int, hot: bool) -> str:
    admission = Admission(settings=AdmissionSettings(affinity=AffinityMode.PREFIX, queue_length=0))
    admission.set_pods(
        pods=[
            PodCapacity(
                name=PodName(f"pod-{i}"),
                address=f"10.0.{i // 250}.{i % 250}:8000",
                cap=64,
                kv_capacity_tokens=400_000,
            )
            for i in range(pods)
        ],
        now=0.0,
    )
    rng = random.Random(1)
    prefixes = [tuple(range(k * 100, k * 100 + 16)) for k in range(1 if hot else 5000)]
    live: list[RequestId] = []
    took: list[float] = []
    for number in range(ASKS):
        ask = Ask(
            id=RequestId(str(number)),
            prompt_tokens=8192,
            prefix=prefixes[rng.randrange(len(prefixes))],
        )
        began = time.perf_counter()
        admission.ask(ask=ask, now=number * 1e-3)
        took.append(time.perf_counter() - began)
        live.append(ask.id)
        if len(live) > pods * 8:
            admission.release(id=live.pop(rng.randrange(len(live))), now=number * 1e-3)
    took.sort()
    picks = {k.name.lower(): v for k, v in admission.stats().picks.items() if v}
    return (
        f"| {pods:,} | {'one hot prompt' if hot else '5,000 prompts'} | "
        f"{took[len(took) // 2] * 1e6:.0f} | {took[int(len(took) * 0.99)] * 1e6:.0f} | {picks} |"
    )


def main() -> None:
    print("| pods | prefixes | ask p50 µs | ask p99 µs | picks |")
    print("|---|---|---|---|---|")
    for pods in (10, 100, 1000):
        for hot in (False, True):
            print(measure(pods=pods, hot=hot))


if __name__ == "__main__":
    main()
