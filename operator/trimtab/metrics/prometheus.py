"""The ``prometheus`` metrics source: a fixed handful of PromQL queries per pool per cycle.

Each signal is one instant query over the pool's namespace (not a list of pods, which would
grow the query with the pool); the answer is filtered to the pool's pods and folded per pod
by the same :func:`~trimtab.metrics.engines.combine` the direct source uses. Fallback series
are tagged with a ``trimtab_candidate`` label so the preference order survives PromQL's
``or``. Sample age comes from ``timestamp()`` against Prometheus's own evaluation time, so a
target that stopped being scraped reads as old, whatever the clocks say.
prometheus-api-client is synchronous: every query runs in a worker thread, with a timeout.
Its requests session is ours (:class:`_BoundedSession`): redirects are never followed (the
token goes to the allowed URL and nowhere else) and no response is read past a size cap.
Errors say what failed (the HTTP status, the exception's type), never the response body or
the exception's text: Prometheus echoes a query back, a proxy may echo the headers.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypedDict

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.errors import SourceUnavailable
from trimtab.metrics.engines import EngineProfile, Selector, Signal, combine, hit_rate
from trimtab.redaction import sanitize

__all__ = ["PrometheusSource", "rate_window_for"]

_CANDIDATE_LABEL = "trimtab_candidate"
_DIVISOR = ":divisor"
"""Suffix of the query key holding a signal's divisor gauge."""
# rate() needs at least four scrapes in its window to be stable.
_SCRAPES_PER_WINDOW = 4
_DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
_STATUS = re.compile(r"^HTTP Status Code (\d{3})\b")
_CHUNK_BYTES = 64 * 1024


class ResponseTooLarge(requests.RequestException):
    """A Prometheus answer over the size cap; the rest of it is never read."""


class ResponseTooSlow(requests.RequestException):
    """A Prometheus answer still arriving after the query's deadline."""


class _BoundedSession(requests.Session):
    """A session that follows no redirect and reads at most ``max_bytes`` of a body, for at
    most ``deadline_s`` (requests' own timeout is per read: a trickle would never end)."""

    def __init__(self, *, max_bytes: int, deadline_s: float) -> None:
        super().__init__()
        self._max_bytes = max_bytes
        self._deadline_s = deadline_s

    def get_redirect_target(self, resp: requests.Response) -> str | None:
        # A 3xx is then the answer itself: it reaches the caller as a non-200 status.
        return None

    def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["stream"] = True
        kwargs["allow_redirects"] = False
        started = time.monotonic()
        response: requests.Response = super().request(method, url, *args, **kwargs)
        body = bytearray()
        try:
            for chunk in response.iter_content(chunk_size=_CHUNK_BYTES):
                body += chunk
                if len(body) > self._max_bytes:
                    raise ResponseTooLarge(f"answer larger than {self._max_bytes} bytes")
                if time.monotonic() - started > self._deadline_s:
                    raise ResponseTooSlow(f"answer not complete within {self._deadline_s:g}s")
        finally:
            response.close()
        # requests reads a streamed body into _content on first access; we did the reading.
        response._content = bytes(body)
        return response


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
        max_body_bytes: int = _DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        self._pool = pool
        self._profile = profile
        self._url = url
        self._timeout_s = timeout_s
        self._pod_label = pod_label
        self._group = f"{namespace_label}, {pod_label}"
        self._scope = ((namespace_label, pool.namespace),)
        self._window = f"{round(rate_window_s * 1000)}ms"
        self._secrets = () if bearer_token is None else (bearer_token,)
        headers = None if bearer_token is None else {"Authorization": f"Bearer {bearer_token}"}
        session = _BoundedSession(max_bytes=max_body_bytes, deadline_s=timeout_s)
        session.verify = not insecure_skip_verify
        self._client = PrometheusConnect(
            url=url.rstrip("/"),
            headers=headers,
            session=session,
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
            # requests' errors derive from OSError.
            raise SourceUnavailable(
                sanitize(
                    f"pool {self._pool}: Prometheus query failed at {self._url}: {_what(exc)}",
                    secrets=self._secrets,
                )
            ) from None
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


def _what(exc: BaseException) -> str:
    """What went wrong, without the text of the error (which may hold the body or a header)."""
    if isinstance(exc, ResponseTooLarge | ResponseTooSlow):
        return str(exc)
    if isinstance(exc, PrometheusApiClientException):
        status = _STATUS.match(str(exc))
        code = status.group(1) if status else "?"
        hint = " (redirects are not followed)" if code.startswith("3") else ""
        return f"HTTP {code}{hint}"
    return type(exc).__name__


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
