"""The ``direct`` metrics source: scrape every pod's ``/metrics`` page in parallel.

No Prometheus is needed and samples are as fresh as the scrape. Scrapes are bounded by a
semaphore and each by a total deadline, so one hung pod delays a cycle by at most the timeout
and never blocks the others. Parsing runs in a worker thread: a thousand pages of histograms
would otherwise stall the event loop every cycle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.errors import SourceUnavailable
from trimtab.metrics.engines import EngineProfile, evaluate
from trimtab.metrics.exposition import Series, parse_exposition
from trimtab.metrics.rates import CounterRates

__all__ = ["DirectSource", "timeout_for"]

_MAX_CONCURRENCY = 32
# Engines answer /metrics in milliseconds; waiting longer than most of a cycle for one pod
# only delays every other pod's decision.
_TIMEOUT_SHARE_OF_INTERVAL = 0.8
_MIN_TIMEOUT_S = 0.2
_MAX_TIMEOUT_S = 5.0


def timeout_for(*, interval_s: float) -> float:
    """Per-pod scrape deadline for a pool read every ``interval_s`` seconds."""
    return min(_MAX_TIMEOUT_S, max(_MIN_TIMEOUT_S, interval_s * _TIMEOUT_SHARE_OF_INTERVAL))


@dataclass(frozen=True, kw_only=True)
class _Scrape:
    series: list[Series]
    at: float
    """Monotonic time the response arrived."""


class DirectSource:
    """Scrapes ``http://<address>:<port><path>`` of each endpoint with one shared client."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        profile: EngineProfile,
        path: str = "/metrics",
        port: int | None = None,
        timeout_s: float = 1.0,
        max_concurrency: int = _MAX_CONCURRENCY,
    ) -> None:
        self._pool = pool
        self._profile = profile
        self._names = profile.sample_names()
        self._path = path
        self._port = port
        self._timeout_s = timeout_s
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._rates = CounterRates()
        self._decode_rates = CounterRates()
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency),
            follow_redirects=False,
        )

    async def read(self, *, endpoints: Sequence[Endpoint]) -> dict[PodName, PodSample]:
        if not endpoints:
            return {}
        scrapes = await asyncio.gather(*(self._scrape(endpoint=e) for e in endpoints))
        failures = [error for error in scrapes if isinstance(error, str)]
        if len(failures) == len(endpoints):
            raise SourceUnavailable(
                f"pool {self._pool}: no pod answered {self._path} "
                f"({len(endpoints)} tried; e.g. {failures[0]})"
            )
        self._rates.retain(pods=[e.name for e in endpoints])
        self._decode_rates.retain(pods=[e.name for e in endpoints])
        now = time.monotonic()
        return {
            endpoint.name: self._sample(pod=endpoint.name, scrape=scrape, now=now)
            for endpoint, scrape in zip(endpoints, scrapes, strict=True)
        }

    async def aclose(self) -> None:
        await self._client.aclose()

    def _sample(self, *, pod: PodName, scrape: _Scrape | str, now: float) -> PodSample:
        if isinstance(scrape, str):
            self._rates.update(pod=pod, total=None, at=now)
            self._decode_rates.update(pod=pod, total=None, at=now)
            return PodSample()
        profile, series = self._profile, scrape.series
        preemption_rate = None
        if profile.preemptions is not None:
            total = evaluate(signal=profile.preemptions, series=series)
            preemption_rate = self._rates.update(pod=pod, total=total, at=scrape.at)
        return PodSample(
            running=evaluate(signal=profile.running, series=series),
            waiting=evaluate(signal=profile.waiting, series=series),
            kv_usage=None
            if profile.kv_usage is None
            else evaluate(signal=profile.kv_usage, series=series),
            preemption_rate=preemption_rate,
            age_s=max(0.0, now - scrape.at),
            decode_tokens_per_s=self._decode_rate(pod=pod, scrape=scrape),
        )

    def _decode_rate(self, *, pod: PodName, scrape: _Scrape) -> float | None:
        signal = self._profile.decode_tokens
        if signal is None:
            return None
        value = evaluate(signal=signal, series=scrape.series)
        if not signal.counter:
            return value
        return self._decode_rates.update(pod=pod, total=value, at=scrape.at)

    async def _scrape(self, *, endpoint: Endpoint) -> _Scrape | str:
        """The pod's parsed series, or a short description of why it could not be read."""
        url = _url(endpoint=endpoint, port=self._port, path=self._path)
        try:
            async with self._semaphore:
                # The deadline starts once a slot is free: queueing is our delay, not the pod's.
                async with asyncio.timeout(self._timeout_s):
                    response = await self._client.get(url)
        except TimeoutError:
            return f"{endpoint.name}: timed out after {self._timeout_s:g}s"
        except httpx.HTTPError as exc:
            return f"{endpoint.name}: {type(exc).__name__}: {str(exc)[:200]}"
        at = time.monotonic()
        if response.status_code != httpx.codes.OK:
            return f"{endpoint.name}: HTTP {response.status_code}"
        series = await asyncio.to_thread(parse_exposition, text=response.text, names=self._names)
        return _Scrape(series=series, at=at)


def _url(*, endpoint: Endpoint, port: int | None, path: str) -> str:
    host = f"[{endpoint.address}]" if ":" in endpoint.address else endpoint.address
    return f"http://{host}:{port or endpoint.port}{path}"
