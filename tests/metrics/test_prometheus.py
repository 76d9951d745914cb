"""The prometheus source against a real Prometheus scraping local pages every second.

Covered: namespace/pod filtering with default and custom label names, several models per pod,
vLLM's KV fallback, NaN, Triton's label filters, counter rates via rate(), stale samples
detected from timestamp(), pods with no series. Against small local HTTP servers: the bearer
token, a query count independent of pool size, HTTP errors and an unreachable server.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from aiohttp import web

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import Engine
from trimtab.errors import SourceUnavailable
from trimtab.metrics.engines import profile_for
from trimtab.metrics.prometheus import PrometheusSource
from trimtab.metrics.source import MetricsSource, build_source

from . import samples
from .conftest import Servers, StartPrometheus, Target, closed_port, eventually, page
from .test_direct import spec

POOL = PoolKey(namespace="serving", name="llama")

VLLM_ONE_NAN = """\
vllm:num_requests_running{model_name="a"} NaN
vllm:num_requests_running{model_name="b"} 3.0
vllm:num_requests_waiting{model_name="a"} 2.0
vllm:kv_cache_usage_perc{model_name="a"} 0.5
"""

VLLM_OTHER_NAMESPACE = 'vllm:num_requests_running{model_name="x"} 100\n'


def _endpoints(*names: str) -> list[Endpoint]:
    return [Endpoint(name=PodName(n), address="10.0.0.1", port=8000) for n in names]


async def _read_when(
    source: MetricsSource, endpoints: list[Endpoint], ready: Any
) -> dict[PodName, PodSample]:
    async def probe() -> dict[PodName, PodSample] | None:
        found = await source.read(endpoints=endpoints)
        return found if ready(found) else None

    return await eventually(probe)


async def test_reads_the_pool_pods_in_its_namespace(
    servers: Servers, prometheus: StartPrometheus
) -> None:
    def labels(namespace: str, pod: str) -> dict[str, str]:
        return {"namespace": namespace, "pod": pod}

    url = await prometheus(
        [
            Target(await servers.serve(page(samples.VLLM_TWO_MODELS)), labels("serving", "a")),
            Target(await servers.serve(page(samples.VLLM_OLD_KV_NAME)), labels("serving", "b")),
            Target(await servers.serve(page(VLLM_ONE_NAN)), labels("serving", "c")),
            Target(await servers.serve(page(VLLM_OTHER_NAMESPACE)), labels("other", "a")),
        ]
    )
    source = build_source(pool=POOL, spec=spec(source="prometheus", prometheus={"url": url}))
    endpoints = _endpoints("a", "b", "c", "absent")
    try:
        # Each signal is its own query: wait until the first scrape is visible to every one.
        found = await _read_when(
            source,
            endpoints,
            lambda f: (
                all(
                    None not in (f[PodName(p)].waiting, f[PodName(p)].kv_usage, f[PodName(p)].age_s)
                    for p in "abc"
                )
                and None not in (f[PodName("a")].running, f[PodName("b")].running)
            ),
        )
    finally:
        await source.aclose()
    a, b, c = (found[PodName(p)] for p in "abc")
    assert (a.running, a.waiting, a.kv_usage) == (9.0, 4.0, 0.5)
    assert (b.running, b.waiting, b.kv_usage) == (4.0, 0.0, 0.875)
    assert (c.running, c.waiting, c.kv_usage) == (None, 2.0, 0.5)
    assert found[PodName("absent")] == PodSample()
    assert all(s.age_s is not None and s.age_s >= 0 for s in (a, b, c))


async def test_custom_label_names_and_label_filters(
    servers: Servers, prometheus: StartPrometheus
) -> None:
    port = await servers.serve(page(samples.TRITON_TRTLLM))
    url = await prometheus(
        [Target(port, {"kubernetes_namespace": "serving", "kubernetes_pod_name": "t"})]
    )
    pool_spec = spec(
        source="prometheus",
        prometheus={
            "url": url,
            "namespaceLabel": "kubernetes_namespace",
            "podLabel": "kubernetes_pod_name",
        },
    ).model_copy(update={"engine": Engine.TRITON_TRTLLM})
    source = build_source(pool=POOL, spec=pool_spec)
    try:
        # Signals are separate queries evaluated at slightly different instants: wait until
        # the first scrape is visible to all of them, not just to one.
        found = await _read_when(
            source,
            _endpoints("t"),
            lambda f: None not in (f[PodName("t")].running, f[PodName("t")].waiting),
        )
    finally:
        await source.aclose()
    assert (found[PodName("t")].running, found[PodName("t")].waiting) == (8.0, 3.0)
    assert found[PodName("t")].kv_usage == 0.375


async def test_counter_becomes_a_rate(servers: Servers, prometheus: StartPrometheus) -> None:
    started = time.monotonic()

    async def rising(request: web.Request) -> web.StreamResponse:
        total = round(10 * (time.monotonic() - started))
        text = (
            f'vllm:num_preemptions_total{{model_name="m"}} {total}\n'
            f'vllm:generation_tokens_total{{model_name="m"}} {total * 100}\n'
        )
        return web.Response(text=text + samples.VLLM_OLD_KV_NAME)

    url = await prometheus(
        [Target(await servers.serve(rising), {"namespace": "serving", "pod": "r"})]
    )
    source = PrometheusSource(
        pool=POOL, profile=profile_for(engine=Engine.VLLM), url=url, rate_window_s=5.0
    )
    try:
        found = await _read_when(source, _endpoints("r"), lambda f: f[PodName("r")].preemption_rate)
    finally:
        await source.aclose()
    # The first rate covers a partly filled window, so only its sign is certain.
    rate = found[PodName("r")].preemption_rate
    assert rate is not None and rate > 0
    decode = found[PodName("r")].decode_tokens_per_s
    assert decode is not None and decode > 0


async def test_old_samples_carry_their_age(servers: Servers, prometheus: StartPrometheus) -> None:
    two_minutes_ago_ms = round((time.time() - 120) * 1000)
    text = f'vllm:num_requests_running{{model_name="m"}} 5 {two_minutes_ago_ms}\n'
    url = await prometheus(
        [Target(await servers.serve(page(text)), {"namespace": "serving", "pod": "s"})]
    )
    source = PrometheusSource(pool=POOL, profile=profile_for(engine=Engine.VLLM), url=url)
    try:
        found = await _read_when(
            source,
            _endpoints("s"),
            lambda f: None not in (f[PodName("s")].running, f[PodName("s")].age_s),
        )
    finally:
        await source.aclose()
    age = found[PodName("s")].age_s
    assert age is not None and age >= 119


def _empty_answer() -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": []}}


async def test_token_is_sent_and_query_count_ignores_pool_size(servers: Servers) -> None:
    seen: list[str | None] = []

    async def api(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization"))
        return web.json_response(_empty_answer())

    port = await servers.serve(api, path="/api/v1/query")
    url = f"http://127.0.0.1:{port}"
    source = build_source(
        pool=POOL, spec=spec(source="prometheus", prometheus={"url": url}), bearer_token="s3cret"
    )
    try:
        await source.read(endpoints=_endpoints("a"))
        for_one = len(seen)
        await source.read(endpoints=_endpoints(*(f"pod-{i}" for i in range(500))))
    finally:
        await source.aclose()
    assert len(seen) == 2 * for_one
    assert set(seen) == {"Bearer s3cret"}


async def test_http_error_is_a_source_failure(servers: Servers) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "error", "error": "overloaded"}, status=503)

    port = await servers.serve(broken, path="/api/v1/query")
    source = PrometheusSource(
        pool=POOL, profile=profile_for(engine=Engine.VLLM), url=f"http://127.0.0.1:{port}"
    )
    try:
        with pytest.raises(SourceUnavailable, match="503"):
            await source.read(endpoints=_endpoints("a"))
    finally:
        await source.aclose()


async def test_unreachable_prometheus_is_a_source_failure() -> None:
    source = PrometheusSource(
        pool=POOL,
        profile=profile_for(engine=Engine.VLLM),
        url=f"http://127.0.0.1:{closed_port()}",
        timeout_s=1.0,
    )
    try:
        with pytest.raises(SourceUnavailable, match="serving/llama"):
            await source.read(endpoints=_endpoints("a"))
    finally:
        await source.aclose()


def test_decode_tokens_query_is_a_rate_for_counters_only() -> None:
    def query(engine: Engine) -> str:
        source = PrometheusSource(
            pool=POOL, profile=profile_for(engine=engine), url="http://127.0.0.1:1"
        )
        return source.queries()["decode_tokens_per_s"]

    assert "rate(vllm:generation_tokens_total{" in query(Engine.VLLM)
    assert "rate(" not in query(Engine.SGLANG)
    assert "sglang:gen_throughput{" in query(Engine.SGLANG)
