"""The ``direct`` metrics source: scrape every pod's ``/metrics`` page in parallel.

No Prometheus is needed and samples are as fresh as the scrape. Scrapes are bounded by a
semaphore and each by a total deadline that covers the body and its parsing, and no body is
read past ``max_body_bytes``: a hung, slow or huge page costs that pod its sample (it goes
Stale, with the reason), never the other pods theirs. Parsing runs in a worker thread: a
thousand pages of histograms would otherwise stall the event loop every cycle.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.errors import SourceUnavailable
from trimtab.metrics.engines import (
    EngineProfile,
    evaluate,
    hit_rate,
    scrape_path,
)
from trimtab.metrics.exposition import Series, parse_exposition
from trimtab.metrics.rates import CounterRates

__all__ = ["DEFAULT_MAX_BODY_BYTES", "DirectSource", "timeout_for"]

_MAX_CONCURRENCY = 32
# Engines answer /metrics in milliseconds; waiting longer than most of a cycle for one pod
# only delays every other pod's decision.
_TIMEOUT_SHARE_OF_INTERVAL = 0.8
_MIN_TIMEOUT_S = 0.2
_MAX_TIMEOUT_S = 5.0
# A vLLM page is ~50 KiB; 4 MiB leaves room for many models and LoRA adapters.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024


def timeout_for(*, interval_s: float) -> float:
    """Per-pod scrape deadline for a pool read every ``interval_s`` seconds."""
    return min(_MAX_TIMEOUT_S, max(_MIN_TIMEOUT_S, interval_s * _TIMEOUT_SHARE_OF_INTERVAL))


@dataclass(frozen=True, kw_only=True)
class _Scrape:
    series: list[Series]
    at: float
    """Monotonic time the response arrived."""


@dataclass(frozen=True, kw_only=True)
class _Failure:
    message: str
    """The kind of failure, never the error's text (it may echo a URL or the page)."""
    unreachable: bool
    """Nothing answered (refused, reset, timed out), as opposed to a bad answer."""


class DirectSource:
    """Scrapes ``http://<address>:<port><path>`` of each endpoint with one shared client."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        profile: EngineProfile,
        path: str | None = None,
        port: int | None = None,
        timeout_s: float = 1.0,
        max_concurrency: int = _MAX_CONCURRENCY,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._pool = pool
        self._profile = profile
        self._names = profile.sample_names()
        self._path = scrape_path(profile=profile, configured=path)
        self._port = port
        self._timeout_s = timeout_s
        self._max_body_bytes = max_body_bytes
        self._semaphore = asyncio.Semaphore(max_concurrency)
        self._rates = CounterRates()
        self._decode_rates = CounterRates()
        self._prefix_query_rates = CounterRates()
        self._prefix_hit_rates = CounterRates()
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency),
            follow_redirects=False,
            # Uncompressed only: the size cap then bounds memory, with no zip bomb to inflate.
            headers={"Accept-Encoding": "identity"},
        )

    async def read(self, *, endpoints: Sequence[Endpoint]) -> dict[PodName, PodSample]:
        if not endpoints:
            return {}
        scrapes = await asyncio.gather(*(self._scrape(endpoint=e) for e in endpoints))
        failures = [
            (endpoint.name, scrape)
            for endpoint, scrape in zip(endpoints, scrapes, strict=True)
            if isinstance(scrape, _Failure)
        ]
        if len(failures) == len(endpoints):
            name, failure = failures[0]
            raise SourceUnavailable(
                f"pool {self._pool}: no pod answered {self._path} "
                f"({len(endpoints)} tried; e.g. {name}: {failure.message})"
            )
        for rates in self._all_rates():
            rates.retain(pods=[e.name for e in endpoints])
        now = time.monotonic()
        return {
            endpoint.name: self._sample(pod=endpoint.name, scrape=scrape, now=now)
            for endpoint, scrape in zip(endpoints, scrapes, strict=True)
        }

    async def aclose(self) -> None:
        await self._client.aclose()

    def _sample(self, *, pod: PodName, scrape: _Scrape | _Failure, now: float) -> PodSample:
        if isinstance(scrape, _Failure):
            for rates in self._all_rates():
                rates.update(pod=pod, total=None, at=now)
            return PodSample(unreachable=scrape.unreachable, problem=scrape.message)
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
            prefix_hit_rate=self._prefix_hit_rate(pod=pod, scrape=scrape),
            kv_capacity_tokens=None
            if profile.kv_capacity is None
            else profile.kv_capacity.tokens(series=series),
        )

    def _all_rates(self) -> tuple[CounterRates, ...]:
        return (self._rates, self._decode_rates, self._prefix_query_rates, self._prefix_hit_rates)

    def _prefix_hit_rate(self, *, pod: PodName, scrape: _Scrape) -> float | None:
        queries, hits = self._profile.prefix_queries, self._profile.prefix_hits
        if queries is None or hits is None:
            return None
        queried = self._prefix_query_rates.update(
            pod=pod, total=evaluate(signal=queries, series=scrape.series), at=scrape.at
        )
        found = self._prefix_hit_rates.update(
            pod=pod, total=evaluate(signal=hits, series=scrape.series), at=scrape.at
        )
        return hit_rate(queries_per_s=queried, hits_per_s=found)

    def _decode_rate(self, *, pod: PodName, scrape: _Scrape) -> float | None:
        signal = self._profile.decode_tokens
        if signal is None:
            return None
        value = evaluate(signal=signal, series=scrape.series)
        if not signal.counter:
            return value
        return self._decode_rates.update(pod=pod, total=value, at=scrape.at)

    async def _scrape(self, *, endpoint: Endpoint) -> _Scrape | _Failure:
        """The pod's parsed series, or why it could not be read."""
        url = _url(endpoint=endpoint, port=self._port, path=self._path)
        answered = asyncio.Event()
        try:
            async with self._semaphore:
                # The deadline starts once a slot is free: queueing is our delay, not the pod's.
                async with asyncio.timeout(self._timeout_s):
                    return await self._fetch(url=url, answered=answered)
        except TimeoutError:
            if answered.is_set():
                message = f"/metrics not read and parsed within {self._timeout_s:g}s"
                return _Failure(message=message, unreachable=False)
            return _Failure(message=f"timed out after {self._timeout_s:g}s", unreachable=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadTimeout) as exc:
            return _Failure(message=type(exc).__name__, unreachable=not answered.is_set())
        except httpx.HTTPError as exc:
            return _Failure(message=type(exc).__name__, unreachable=False)

    async def _fetch(self, *, url: str, answered: asyncio.Event) -> _Scrape | _Failure:
        async with self._client.stream("GET", url) as response:
            answered.set()
            if response.status_code != httpx.codes.OK:
                return _Failure(message=f"HTTP {response.status_code}", unreachable=False)
            encoding = response.headers.get("content-encoding", "identity").strip().lower()
            if encoding != "identity":
                return _Failure(message=f"compressed page ({encoding[:16]})", unreachable=False)
            body = bytearray()
            async for chunk in response.aiter_raw():
                body += chunk
                if len(body) > self._max_body_bytes:
                    message = f"/metrics page larger than {_size(self._max_body_bytes)}"
                    return _Failure(message=message, unreachable=False)
        at = time.monotonic()
        text = body.decode("utf-8", errors="replace")
        del body
        series = await asyncio.to_thread(parse_exposition, text=text, names=self._names)
        return _Scrape(series=series, at=at)


def _size(count: int) -> str:
    return f"{count / 1048576:g} MiB" if count >= 1048576 else f"{count} bytes"


def _url(*, endpoint: Endpoint, port: int | None, path: str) -> str:
    host = f"[{endpoint.address}]" if ":" in endpoint.address else endpoint.address
    return f"http://{host}:{port or endpoint.port}{path}"
