"""Every engine profile against exposition pages per engine and version line.

The pages in ``fixtures/`` are written from the engines' own metric definitions (names, types,
label sets; the version is in each file name). Covered: vLLM's old, both and new KV and
prefix-counter names; SGLang before the retraction counter and with priority scheduling (the
``priority=""`` total, never the sum); TGI's KV budget gauge, its override and its absence, and
its generated-tokens histogram; trtllm-serve 1.2 (no load gauges) and 1.3, and its
``/prometheus/metrics`` path; Triton's C++ backend. Also the prefix-cache hit rate through the
direct source, and through a real Prometheus for SGLang's priority filter and TGI's budget.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from trimtab.api.records import Endpoint, PodName, PoolKey
from trimtab.api.spec import Engine
from trimtab.metrics.direct import DirectSource
from trimtab.metrics.engines import EngineProfile, Signal, evaluate, profile_for, scrape_path
from trimtab.metrics.exposition import parse_exposition
from trimtab.metrics.prometheus import PrometheusSource

from .conftest import Servers, StartPrometheus, Target, eventually, page

FIXTURES = Path(__file__).parent / "fixtures"
POOL = PoolKey(namespace="serving", name="pool")
POD = PodName("p")


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.prom").read_text()


def _value(profile: EngineProfile, signal: Signal | None, text: str) -> float | None:
    if signal is None:
        return None
    return evaluate(signal=signal, series=parse_exposition(text=text, names=profile.sample_names()))


def _read(engine: Engine, name: str, budget: int | None = None) -> tuple[float | None, ...]:
    profile = profile_for(engine=engine, tgi_token_budget=budget)
    text = fixture(name)
    signals = (profile.running, profile.waiting, profile.kv_usage, profile.preemptions)
    return tuple(_value(profile, signal, text) for signal in signals)


@pytest.mark.parametrize(
    ("engine", "name", "expected"),
    [
        (Engine.VLLM, "vllm-0.9.1", (4.0, 0.0, 0.875, 3.0)),
        (Engine.VLLM, "vllm-0.10.2", (7.0, 3.0, 0.5, 12.0)),
        # Two data-parallel engines: requests add up, the fuller cache counts.
        (Engine.VLLM, "vllm-0.12.0", (11.0, 3.0, 0.625, 3.0)),
        (Engine.SGLANG, "sglang-0.5.6", (12.0, 4.0, 0.71, None)),
        # The priority="" totals, not totals plus per-priority series (24 and 8).
        (Engine.SGLANG, "sglang-0.5.10-priority", (12.0, 4.0, 0.71, 9.0)),
        (Engine.TGI, "tgi-3.3", (16.0, 5.0, 0.5, None)),
        (Engine.TGI, "tgi-2.2", (8.0, 2.0, None, None)),
        (Engine.TRTLLM, "trtllm-1.3", (20.0, 6.0, 0.9, None)),
        (Engine.TRTLLM, "trtllm-1.2", (None, None, None, None)),
        (Engine.TRITON_TRTLLM, "triton-trtllm-backend-0.9+", (8.0, 3.0, 0.375, None)),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_fixture_reads_as_the_engine_meant(
    engine: Engine, name: str, expected: tuple[float | None, ...]
) -> None:
    assert _read(engine, name) == pytest.approx(expected)


def test_tgi_budget_from_the_spec_overrides_the_gauge() -> None:
    # 48,000 reserved tokens over a configured 64,000 rather than the exported 96,000.
    assert _read(Engine.TGI, "tgi-3.3", budget=64_000)[2] == 0.75
    assert _read(Engine.TGI, "tgi-2.2", budget=48_000)[2] == 0.5


@pytest.mark.parametrize("budget", ["0", "-1", "NaN"])
def test_unusable_tgi_budget_gauge_makes_kv_unknown(budget: str) -> None:
    profile = profile_for(engine=Engine.TGI)
    text = f"tgi_batch_current_max_tokens 100\ntgi_batch_max_total_tokens {budget}\n"
    assert _value(profile, profile.kv_usage, text) is None


@pytest.mark.parametrize(
    ("engine", "name", "total"),
    [
        (Engine.VLLM, "vllm-0.10.2", 91234.0),
        # The histogram's _sum: TGI has no tgi_request_generated_tokens_total.
        (Engine.TGI, "tgi-3.3", 456789.0),
        (Engine.TRTLLM, "trtllm-1.3", 5000.0),
        (Engine.SGLANG, "sglang-0.5.10-priority", 1450.5),
    ],
)
def test_decode_tokens_series(engine: Engine, name: str, total: float) -> None:
    profile = profile_for(engine=engine)
    assert _value(profile, profile.decode_tokens, fixture(name)) == total


@pytest.mark.parametrize(
    ("engine", "name", "queries", "hits"),
    [
        (Engine.VLLM, "vllm-0.9.1", 1000.0, 250.0),
        (Engine.VLLM, "vllm-0.10.2", 2000.0, 500.0),
        (Engine.VLLM, "vllm-0.12.0", 4000.0, 2000.0),
        (Engine.SGLANG, "sglang-0.5.6", 80000.0, 20000.0),
        (Engine.SGLANG, "sglang-0.5.10-priority", 80000.0, 20000.0),
    ],
)
def test_prefix_cache_counters(engine: Engine, name: str, queries: float, hits: float) -> None:
    profile = profile_for(engine=engine)
    text = fixture(name)
    assert _value(profile, profile.prefix_queries, text) == queries
    assert _value(profile, profile.prefix_hits, text) == hits


@pytest.mark.parametrize("engine", [Engine.TGI, Engine.TRTLLM, Engine.TRITON_TRTLLM])
def test_engines_without_prefix_counters(engine: Engine) -> None:
    profile = profile_for(engine=engine)
    assert (profile.prefix_queries, profile.prefix_hits) == (None, None)


def test_trtllm_scrapes_prometheus_metrics_unless_told_otherwise() -> None:
    trtllm, vllm = profile_for(engine=Engine.TRTLLM), profile_for(engine=Engine.VLLM)
    assert scrape_path(profile=trtllm, configured=None) == "/prometheus/metrics"
    assert scrape_path(profile=trtllm, configured="/metrics") == "/metrics"
    assert scrape_path(profile=trtllm, configured="/custom") == "/custom"
    assert scrape_path(profile=vllm, configured=None) == "/metrics"


async def test_direct_source_reads_trtllm_at_its_prometheus_path(servers: Servers) -> None:
    async def json_stats(request: web.Request) -> web.StreamResponse:
        return web.json_response([{"iter": 1, "numActiveRequests": 99}])

    app_port = await servers.serve(page(fixture("trtllm-1.3")), path="/prometheus/metrics")
    json_port = await servers.serve(json_stats)
    source = DirectSource(pool=POOL, profile=profile_for(engine=Engine.TRTLLM))
    try:
        good = await source.read(endpoints=[Endpoint(name=POD, address="127.0.0.1", port=app_port)])
        # /metrics (JSON) is never read: where only it exists, the pod is unreadable.
        bad = await source.read(
            endpoints=[
                Endpoint(name=POD, address="127.0.0.1", port=app_port),
                Endpoint(name=PodName("json"), address="127.0.0.1", port=json_port),
            ]
        )
    finally:
        await source.aclose()
    assert (good[POD].running, good[POD].waiting, good[POD].kv_usage) == (20.0, 6.0, 0.9)
    assert bad[PodName("json")].running is None


async def test_direct_source_turns_prefix_counters_into_a_hit_rate(servers: Servers) -> None:
    totals = iter([(1000, 100), (3000, 1600), (3000, 1600)])

    async def counters(request: web.Request) -> web.StreamResponse:
        queries, hits = next(totals)
        text = (
            'vllm:num_requests_running{model_name="m",engine="0"} 1\n'
            f'vllm:prefix_cache_queries_total{{model_name="m",engine="0"}} {queries}\n'
            f'vllm:prefix_cache_hits_total{{model_name="m",engine="0"}} {hits}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    port = await servers.serve(counters)
    endpoint = Endpoint(name=POD, address="127.0.0.1", port=port)
    source = DirectSource(pool=POOL, profile=profile_for(engine=Engine.VLLM))
    try:
        first = await source.read(endpoints=[endpoint])
        await asyncio.sleep(0.05)
        second = await source.read(endpoints=[endpoint])
        await asyncio.sleep(0.05)
        idle = await source.read(endpoints=[endpoint])
    finally:
        await source.aclose()
    assert first[POD].prefix_hit_rate is None
    # 1,500 of 2,000 new prompt tokens were cached, whatever the interval was.
    assert second[POD].prefix_hit_rate == pytest.approx(0.75)
    assert idle[POD].prefix_hit_rate is None


def test_prometheus_queries_the_budget_and_prefix_counters_once_each() -> None:
    tgi = PrometheusSource(pool=POOL, profile=profile_for(engine=Engine.TGI), url="http://x")
    sglang = PrometheusSource(pool=POOL, profile=profile_for(engine=Engine.SGLANG), url="http://x")
    tgi_queries, sglang_queries = tgi.queries(), sglang.queries()
    assert "tgi_batch_max_total_tokens" in tgi_queries["kv_usage:divisor"]
    assert "prefix_queries" not in tgi_queries
    assert 'priority=""' in sglang_queries["running"]
    assert sglang_queries["prefix_hits"].startswith("label_replace(rate(sglang:cached_tokens")


async def test_priority_totals_and_tgi_budget_through_prometheus(
    servers: Servers, prometheus: StartPrometheus
) -> None:
    sglang_port = await servers.serve(page(fixture("sglang-0.5.10-priority")))
    tgi_port = await servers.serve(page(fixture("tgi-3.3")))
    url = await prometheus(
        [
            Target(sglang_port, {"namespace": "serving", "pod": "s"}),
            Target(tgi_port, {"namespace": "serving", "pod": "t"}),
        ]
    )
    found = {}
    for engine, pod in ((Engine.SGLANG, "s"), (Engine.TGI, "t")):
        source = PrometheusSource(pool=POOL, profile=profile_for(engine=engine), url=url)
        endpoints = [Endpoint(name=PodName(pod), address="127.0.0.1", port=1)]

        async def probe(
            source: PrometheusSource = source, endpoints: list[Endpoint] = endpoints
        ) -> tuple[float | None, ...] | None:
            sample = (await source.read(endpoints=endpoints))[endpoints[0].name]
            values = (sample.running, sample.waiting, sample.kv_usage)
            return None if None in values else values

        try:
            found[engine] = await eventually(probe)
        finally:
            await source.aclose()
    assert found[Engine.SGLANG] == pytest.approx((12.0, 4.0, 0.71))
    assert found[Engine.TGI] == pytest.approx((16.0, 5.0, 0.5))


@pytest.mark.parametrize(
    ("name", "engine", "tokens"),
    [("vllm-0.12.0", Engine.VLLM, 25_000 * 16), ("tgi-3.3", Engine.TGI, 96_000)],
)
def test_kv_capacity_in_tokens_comes_from_the_engine(
    name: str, engine: Engine, tokens: int | None
) -> None:
    profile = profile_for(engine=engine)
    assert profile.kv_capacity is not None
    found = profile.kv_capacity.tokens(
        series=parse_exposition(text=fixture(name), names=profile.sample_names())
    )
    assert found == tokens
