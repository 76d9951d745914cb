"""Both sources stop reading at the size cap, and the Prometheus source follows no redirect.

Covered: a direct page over the cap makes that pod alone unusable with the reason (the other
pod keeps its sample); a compressed page is refused (the cap must bound memory, not the
compressed size); a Prometheus answer over the cap, and a redirect, fail the read with a
message naming the cap or the redirect and quoting nothing of the answer.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from trimtab.api.records import Endpoint, PodName, PoolKey
from trimtab.api.spec import Engine
from trimtab.errors import SourceUnavailable
from trimtab.metrics.direct import DirectSource
from trimtab.metrics.engines import profile_for
from trimtab.metrics.prometheus import PrometheusSource

from . import samples
from .conftest import Servers, page

POOL = PoolKey(namespace="serving", name="llama")


def _endpoint(name: str, port: int) -> Endpoint:
    return Endpoint(name=PodName(name), address="127.0.0.1", port=port)


async def test_a_page_over_the_cap_costs_only_its_pod(servers: Servers) -> None:
    good = await servers.serve(page(samples.VLLM_TWO_MODELS))
    huge = await servers.serve(page(samples.VLLM_TWO_MODELS + "# padding\n" * 20_000))
    source = DirectSource(
        pool=POOL, profile=profile_for(engine=Engine.VLLM), timeout_s=2.0, max_body_bytes=64_000
    )
    try:
        found = await source.read(endpoints=[_endpoint("a", good), _endpoint("b", huge)])
    finally:
        await source.aclose()
    assert found[PodName("a")].running == 9.0 and found[PodName("a")].problem is None
    assert found[PodName("b")].running is None
    assert found[PodName("b")].problem == "/metrics page larger than 64000 bytes"
    assert not found[PodName("b")].unreachable


async def test_a_compressed_page_is_refused(servers: Servers) -> None:
    async def gzipped(request: web.Request) -> web.StreamResponse:
        response = web.Response(text=samples.VLLM_TWO_MODELS, content_type="text/plain")
        response.enable_compression(force=web.ContentCoding.gzip)
        return response

    port = await servers.serve(gzipped)
    good = await servers.serve(page(samples.VLLM_TWO_MODELS))
    source = DirectSource(pool=POOL, profile=profile_for(engine=Engine.VLLM), timeout_s=2.0)
    try:
        found = await source.read(endpoints=[_endpoint("a", port), _endpoint("b", good)])
    finally:
        await source.aclose()
    assert found[PodName("a")].problem == "compressed page (gzip)"


def _prometheus(port: int, *, max_body_bytes: int = 4_000_000) -> PrometheusSource:
    return PrometheusSource(
        pool=POOL,
        profile=profile_for(engine=Engine.VLLM),
        url=f"http://127.0.0.1:{port}",
        bearer_token="tok-secret-123",
        timeout_s=2.0,
        max_body_bytes=max_body_bytes,
    )


async def test_a_prometheus_answer_over_the_cap_fails_the_read(servers: Servers) -> None:
    async def huge(request: web.Request) -> web.Response:
        result = [{"metric": {"pod": "a"}, "value": [1, "1"]}] * 20_000
        return web.json_response({"status": "success", "data": {"result": result}})

    port = await servers.serve(huge, path="/api/v1/query")
    source = _prometheus(port, max_body_bytes=100_000)
    try:
        with pytest.raises(SourceUnavailable, match="answer larger than 100000 bytes"):
            await source.read(endpoints=[_endpoint("a", 1)])
    finally:
        await source.aclose()


async def test_prometheus_redirects_are_not_followed(servers: Servers) -> None:
    followed: list[str] = []

    async def target(request: web.Request) -> web.Response:
        followed.append(request.headers.get("Authorization", ""))
        return web.json_response({"status": "success", "data": {"result": []}})

    elsewhere = await servers.serve(target, path="/elsewhere")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{elsewhere}/elsewhere?tok-secret-123")

    port = await servers.serve(redirect, path="/api/v1/query")
    source = _prometheus(port)
    try:
        with pytest.raises(SourceUnavailable) as raised:
            await source.read(endpoints=[_endpoint("a", 1)])
    finally:
        await source.aclose()
    assert followed == []
    assert "HTTP 307 (redirects are not followed)" in str(raised.value)
    assert "tok-secret-123" not in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
