"""The direct source against real local HTTP servers.

Covered: one sample per endpoint, several engines, garbage pages, a pod that hangs past the
timeout, HTTP errors, every pod down (SourceUnavailable), counter rates across scrapes, the
metrics port override, and build_source picking this source. Not covered: IPv6 addresses
(the URL bracketing is trivial and 127.0.0.1 is the only address tests may bind).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from aiohttp import web

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import Engine, InferencePoolSpec
from trimtab.errors import SourceUnavailable
from trimtab.metrics.direct import DirectSource
from trimtab.metrics.engines import profile_for
from trimtab.metrics.source import build_source

from . import samples
from .conftest import Servers, closed_port, page

POOL = PoolKey(namespace="serving", name="llama")


def _endpoint(name: str, port: int) -> Endpoint:
    return Endpoint(name=PodName(name), address="127.0.0.1", port=port)


def _source(engine: Engine = Engine.VLLM, **kwargs: Any) -> DirectSource:
    return DirectSource(pool=POOL, profile=profile_for(engine=engine), timeout_s=0.5, **kwargs)


def spec(**metrics: Any) -> InferencePoolSpec:
    return InferencePoolSpec.model_validate(
        {
            "selector": {"matchLabels": {"app": "llama"}},
            "engine": "vllm",
            "metrics": metrics,
            "targets": [{"envoy": {"cluster": "llama"}}],
        }
    )


async def test_every_endpoint_gets_a_sample(servers: Servers) -> None:
    good = await servers.serve(page(samples.VLLM_TWO_MODELS))
    old = await servers.serve(page(samples.VLLM_OLD_KV_NAME))
    source = _source()
    try:
        found = await source.read(endpoints=[_endpoint("a", good), _endpoint("b", old)])
    finally:
        await source.aclose()
    assert set(found) == {"a", "b"}
    assert (found[PodName("a")].running, found[PodName("a")].kv_usage) == (9.0, 0.5)
    assert (found[PodName("b")].running, found[PodName("b")].kv_usage) == (4.0, 0.875)
    assert all(s.age_s is not None and s.age_s >= 0 for s in found.values())


@pytest.mark.parametrize(
    ("engine", "text", "running"),
    [
        (Engine.SGLANG, samples.SGLANG, 12.0),
        (Engine.TGI, samples.TGI, 16.0),
        (Engine.TRTLLM, samples.TRTLLM, 20.0),
        (Engine.TRITON_TRTLLM, samples.TRITON_TRTLLM, 8.0),
    ],
)
async def test_other_engines_over_http(
    servers: Servers, engine: Engine, text: str, running: float
) -> None:
    port = await servers.serve(page(text), path=profile_for(engine=engine).metrics_path)
    source = _source(engine)
    try:
        found = await source.read(endpoints=[_endpoint("a", port)])
    finally:
        await source.aclose()
    assert found[PodName("a")].running == running


async def test_broken_pods_read_as_unknown_next_to_a_good_one(servers: Servers) -> None:
    good = await servers.serve(page(samples.VLLM_TWO_MODELS))
    garbage = await servers.serve(page(samples.GARBAGE))
    hung = await servers.serve_hanging()

    async def fail(request: web.Request) -> web.StreamResponse:
        return web.Response(status=500, text="boom")

    failing = await servers.serve(fail)
    endpoints = [
        _endpoint("good", good),
        _endpoint("garbage", garbage),
        _endpoint("hung", hung),
        _endpoint("failing", failing),
        _endpoint("down", closed_port()),
    ]
    source = _source()
    try:
        found = await source.read(endpoints=endpoints)
    finally:
        await source.aclose()
    assert found[PodName("good")].running == 9.0
    assert found[PodName("garbage")] == PodSample(age_s=found[PodName("garbage")].age_s)
    # A failed read says why (the pod is then Stale with that reason), never quoting the body.
    assert found[PodName("failing")] == PodSample(problem="HTTP 500")
    # A pod that does not answer at all is told apart: the policy takes its weight down.
    for name in ("hung", "down"):
        assert found[PodName(name)].unreachable
        assert found[PodName(name)].running is None
    assert not found[PodName("good")].unreachable


async def test_every_pod_unreachable_is_a_source_failure(servers: Servers) -> None:
    hung = await servers.serve_hanging()
    source = _source()
    try:
        with pytest.raises(SourceUnavailable, match="serving/llama"):
            await source.read(endpoints=[_endpoint("a", closed_port()), _endpoint("b", hung)])
    finally:
        await source.aclose()


async def test_no_endpoints_reads_nothing() -> None:
    source = _source()
    try:
        assert await source.read(endpoints=[]) == {}
    finally:
        await source.aclose()


async def test_preemption_counter_becomes_a_rate(servers: Servers) -> None:
    totals = itertools.count(start=100, step=5)

    async def rising(request: web.Request) -> web.StreamResponse:
        total = next(totals)
        text = (
            f'vllm:num_preemptions_total{{model_name="m"}} {total}\n'
            f'vllm:generation_tokens_total{{model_name="m"}} {total * 100}\n'
        )
        return web.Response(text=text + samples.VLLM_OLD_KV_NAME)

    port = await servers.serve(rising)
    source = _source()
    try:
        first = await source.read(endpoints=[_endpoint("a", port)])
        second = await source.read(endpoints=[_endpoint("a", port)])
    finally:
        await source.aclose()
    assert first[PodName("a")].preemption_rate is None
    rate = second[PodName("a")].preemption_rate
    assert rate is not None and rate > 0
    # Generated tokens are a counter too: no rate on the first scrape, then tokens/s.
    assert first[PodName("a")].decode_tokens_per_s is None
    decode = second[PodName("a")].decode_tokens_per_s
    assert decode is not None and decode == pytest.approx(100 * rate)


async def test_build_source_scrapes_the_metrics_port_and_path(servers: Servers) -> None:
    port = await servers.serve(page(samples.VLLM_TWO_MODELS), path="/stats/prometheus")
    source = build_source(
        pool=POOL, spec=spec(source="direct", port=port, path="/stats/prometheus", interval="1s")
    )
    assert isinstance(source, DirectSource)
    try:
        # The serving port is closed: only the metrics port override can reach the page.
        found = await source.read(endpoints=[_endpoint("a", closed_port())])
    finally:
        await source.aclose()
    assert found[PodName("a")].waiting == 4.0
