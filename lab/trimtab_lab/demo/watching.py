"""Watch the replicas while a mode runs: scrape every emulator's ``/metrics`` on a fixed beat.

Each sample holds, per replica, running and waiting requests, KV-cache usage and the
preemption counter, read through the operator's own vLLM profile (:mod:`trimtab.metrics`) and
stamped with wall seconds since the run started. The samples feed the live load bars, the
per-replica KV time series of the figure and the imbalance figure. A replica that does not
answer within the timeout keeps its previous values. How long a scrape took shows whether the
emulators' event loop kept up (a harness health check).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from trimtab.api.spec import Engine
from trimtab.metrics.engines import Signal, evaluate, profile_for
from trimtab.metrics.exposition import parse_exposition

__all__ = ["FleetWatcher", "ReplicaLoad", "Sample", "parse_vllm_metrics"]

_VLLM = profile_for(engine=Engine.VLLM)
_WANTED = _VLLM.sample_names()


@dataclass(frozen=True, kw_only=True)
class ReplicaLoad:
    running: float = 0.0
    waiting: float = 0.0
    kv: float = 0.0
    """KV-cache usage, 0..1."""
    preemptions: float = 0.0
    """Preemptions since the replica started (a counter)."""


@dataclass(frozen=True, kw_only=True)
class Sample:
    at_s: float
    """Wall seconds since the watcher started."""
    replicas: tuple[ReplicaLoad, ...]
    scrape_s: float = 0.0
    """Wall seconds the slowest replica took to answer: the emulators' own lag."""


def parse_vllm_metrics(text: str) -> ReplicaLoad:
    """One vLLM ``/metrics`` page, read as the operator reads it (0 where a series is missing)."""
    series = parse_exposition(text=text, names=_WANTED)

    def value(signal: Signal | None) -> float:
        found = None if signal is None else evaluate(signal=signal, series=series)
        return 0.0 if found is None else found

    return ReplicaLoad(
        running=value(_VLLM.running),
        waiting=value(_VLLM.waiting),
        kv=value(_VLLM.kv_usage),
        preemptions=value(_VLLM.preemptions),
    )


class FleetWatcher:
    """Scrapes ``urls`` every ``interval_s`` while :meth:`run` runs; :attr:`samples` grows."""

    def __init__(self, *, urls: Sequence[str], interval_s: float = 0.5) -> None:
        self._urls = tuple(f"{url.rstrip('/')}/metrics" for url in urls)
        self._interval_s = interval_s
        self.samples: list[Sample] = []
        self.latest: tuple[ReplicaLoad, ...] = tuple(ReplicaLoad() for _ in urls)

    async def run(self) -> None:
        """Sample until cancelled."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with httpx.AsyncClient(timeout=1.0) as client:
            while True:
                tick = loop.time()
                pages = await asyncio.gather(
                    *(client.get(url) for url in self._urls), return_exceptions=True
                )
                self.latest = tuple(
                    parse_vllm_metrics(page.text)
                    if isinstance(page, httpx.Response) and page.status_code == 200
                    else previous
                    for page, previous in zip(pages, self.latest, strict=True)
                )
                self.samples.append(
                    Sample(at_s=tick - start, replicas=self.latest, scrape_s=loop.time() - tick)
                )
                await asyncio.sleep(max(0.0, tick + self._interval_s - loop.time()))
