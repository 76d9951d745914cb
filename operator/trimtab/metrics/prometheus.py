"""The ``prometheus`` metrics source: a fixed handful of PromQL queries per pool per cycle.

Each signal is one instant query over the pool's namespace (not a list of pods, which would
grow the query with the pool); the answer is filtered to the pool's pods and folded per pod
by the same :func:`~trimtab.metrics.engines.combine` the direct source uses. Fallback series
are tagged with a ``trimtab_candidate`` label so the preference order survives PromQL's
``or``. Sample age comes from ``timestamp()`` against Prometheus's own evaluation time, so a
target that stopped being scraped reads as old, whatever the clocks say.
prometheus-api-client is synchronous: every query runs in a worker thread, with a timeout.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypedDict

from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.errors import SourceUnavailable
from trimtab.metrics.engines import EngineProfile, Selector, Signal, combine, hit_rate

__all__ = ["PrometheusSource", "rate_window_for"]

_CANDIDATE_LABEL = "trimtab_candidate"
_DIVISOR = ":divisor"
"""Suffix of the query key holding a signal's divisor gauge."""
# rate() needs at least four scrapes in its window to be stable.
_SCRAPES_PER_WINDOW = 4


class _PromResult(TypedDict):
    """One element of ``data.result`` of an instant query."""

    metric: dict[str, str]
    value: list[Any]
    """``[evaluation_unix_time, "value as text"]``."""


def rate_window_for(*, interval_s: float, scrape_interval_s: float) -> float:
    """Seconds of ``rate()`` window for a pool read every ``interval_s`` seconds."""
    return _SCRAPES_PER_WINDOW * max(interval_s, scrape_interval_s)


class PrometheusSource:
    """Reads one pool from a Prometheus HTTP API with a constant number of queries per cycle."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        profile: EngineProfile,
        url: str,
        bearer_token: str | None = None,
        insecure_skip_verify: bool = False,
        timeout_s: float = 5.0,
        namespace_label: str = "namespace",
        pod_label: str = "pod",
        rate_window_s: float = 60.0,
    ) -> None:
        self._pool = pool
        self._profile = profile
        self._url = url
        self._timeout_s = timeout_s
        self._pod_label = pod_label
        self._group = f"{namespace_label}, {pod_label}"
        self._scope = ((namespace_label, pool.namespace),)
        self._window = f"{round(rate_window_s * 1000)}ms"
        headers = None if bearer_token is None else {"Authorization": f"Bearer {bearer_token}"}
        self._client = PrometheusConnect(
            url=url.rstrip("/"),
            headers=headers,
            disable_ssl=insecure_skip_verify,
            # The next cycle is the retry; urllib3's default backoff would outlast the interval.
            retry=Retry(total=0),
            timeout=timeout_s,
        )

    def queries(self) -> dict[str, str]:
        """The PromQL sent each cycle, by signal; the same for any number of pods."""
        found: dict[str, str] = {"timestamp": self._timestamp_query(self._profile.running)}
        for key, signal in self._signals().items():
            query = self._rate_query if signal.counter else self._gauge_query
            found[key] = query(signal)
            if signal.divisor is not None:
                found[key + _DIVISOR] = self._tagged(
                    expression=self._selector(signal.divisor), index=0
                )
        return found

    def _signals(self) -> dict[str, Signal]:
        profile = self._profile
        found: dict[str, Signal | None] = {
            "running": profile.running,
            "waiting": profile.waiting,
            "kv_usage": profile.kv_usage,
            "preemption_rate": profile.preemptions,
            "decode_tokens_per_s": profile.decode_tokens,
            "prefix_queries": profile.prefix_queries,
            "prefix_hits": profile.prefix_hits,
        }
        return {key: signal for key, signal in found.items() if signal is not None}

    async def read(self, *, endpoints: Sequence[Endpoint]) -> dict[PodName, PodSample]:
        if not endpoints:
            return {}
        queries = self.queries()
        answers = await asyncio.gather(
            *(asyncio.to_thread(self._query, query) for query in queries.values()),
            return_exceptions=True,
        )
        by_signal: dict[str, list[_PromResult]] = {}
        for key, answer in zip(queries, answers, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            by_signal[key] = answer
        pods = {endpoint.name for endpoint in endpoints}
        values = {
            key: self._per_pod(
                signal=signal,
                results=by_signal[key],
                divisors=by_signal.get(key + _DIVISOR, []),
                pods=pods,
            )
            for key, signal in self._signals().items()
        }
        ages = self._ages(results=by_signal["timestamp"], pods=pods)
        queried, hit = values.get("prefix_queries", {}), values.get("prefix_hits", {})
        return {
            endpoint.name: PodSample(
                running=values["running"].get(endpoint.name),
                waiting=values["waiting"].get(endpoint.name),
                kv_usage=values.get("kv_usage", {}).get(endpoint.name),
                preemption_rate=values.get("preemption_rate", {}).get(endpoint.name),
                age_s=ages.get(endpoint.name),
                decode_tokens_per_s=values.get("decode_tokens_per_s", {}).get(endpoint.name),
                prefix_hit_rate=hit_rate(
                    queries_per_s=queried.get(endpoint.name), hits_per_s=hit.get(endpoint.name)
                ),
            )
            for endpoint in endpoints
        }

    async def aclose(self) -> None:
        await asyncio.to_thread(self._client.close)

    def _query(self, query: str) -> list[_PromResult]:
        """Runs in a worker thread; the one place library errors become ours."""
        try:
            result: list[_PromResult] = self._client.custom_query(
                query=query, params={"timeout": f"{round(self._timeout_s * 1000)}ms"}
            )
        except (OSError, ValueError, KeyError, TypeError, PrometheusApiClientException) as exc:
            # requests' errors derive from OSError; the text is cut to keep tokens and
            # long response bodies out of the logs.
            raise SourceUnavailable(
                f"pool {self._pool}: Prometheus query failed at {self._url}: "
                f"{type(exc).__name__}: {str(exc)[:256]}"
            ) from exc
        if not isinstance(result, list):
            raise SourceUnavailable(f"pool {self._pool}: Prometheus answered no result list")
        return result

    def _per_pod(
        self,
        *,
        signal: Signal,
        results: list[_PromResult],
        divisors: list[_PromResult],
        pods: set[PodName],
    ) -> dict[PodName, float | None]:
        found: dict[PodName, list[list[float]]] = defaultdict(
            lambda: [[] for _ in signal.selectors]
        )
        budgets: dict[PodName, list[float]] = defaultdict(list)
        for result in divisors:
            pod = self._pod_of(result=result, pods=pods)
            value = _float(result["value"], 1)
            if pod is not None:
                budgets[pod].append(float("nan") if value is None else value)
        for result in results:
            pod = self._pod_of(result=result, pods=pods)
            candidate = _int(result["metric"].get(_CANDIDATE_LABEL))
            value = _float(result["value"], 1)
            if pod is None or candidate is None or not 0 <= candidate < len(signal.selectors):
                continue
            # An unreadable value is kept as NaN so that combine() refuses the whole signal.
            found[pod][candidate].append(float("nan") if value is None else value)
        return {
            pod: combine(signal=signal, candidates=lists, divisor=budgets.get(pod, []))
            for pod, lists in found.items()
        }

    def _ages(self, *, results: list[_PromResult], pods: set[PodName]) -> dict[PodName, float]:
        ages: dict[PodName, float] = {}
        for result in results:
            pod = self._pod_of(result=result, pods=pods)
            evaluated_at, sampled_at = _float(result["value"], 0), _float(result["value"], 1)
            if pod is None or evaluated_at is None or sampled_at is None:
                continue
            ages[pod] = max(0.0, evaluated_at - sampled_at)
        return ages

    def _pod_of(self, *, result: _PromResult, pods: set[PodName]) -> PodName | None:
        pod = PodName(result["metric"].get(self._pod_label, ""))
        return pod if pod in pods else None

    def _selector(self, selector: Selector) -> str:
        matchers = ", ".join(f"{k}={_quote(v)}" for k, v in (*self._scope, *selector.labels))
        return f"{selector.name}{{{matchers}}}"

    def _tagged(self, *, expression: str, index: int) -> str:
        return f'label_replace({expression}, "{_CANDIDATE_LABEL}", "{index}", "", "")'

    def _gauge_query(self, signal: Signal) -> str:
        return " or ".join(
            self._tagged(expression=self._selector(sel), index=i)
            for i, sel in enumerate(signal.selectors)
        )

    def _rate_query(self, signal: Signal) -> str:
        return " or ".join(
            self._tagged(expression=f"rate({self._selector(sel)}[{self._window}])", index=i)
            for i, sel in enumerate(signal.selectors)
        )

    def _timestamp_query(self, signal: Signal) -> str:
        # timestamp() must wrap the selector itself: around any other expression it returns
        # the evaluation time, which would make every sample look fresh.
        stamps = " or ".join(f"timestamp({self._selector(sel)})" for sel in signal.selectors)
        return f"max by ({self._group}) ({stamps})"


def _quote(value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _float(pair: list[Any], index: int) -> float | None:
    try:
        return float(pair[index])
    except (IndexError, TypeError, ValueError):
        return None
