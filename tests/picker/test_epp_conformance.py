"""EPP protocol conformance with the real Envoy 1.40: what Envoy does with the picker's answers.

Covered: the destination in the header alone and in ``envoy.lb`` metadata alone both route to
the picked pod; fallbacks are used on retry; the subset hint (comma string and list forms)
restricts the pick; 503 without endpoints; 429 with Retry-After on a full queue and on TTL; the
served endpoint reaches the picker as ``envoy.lb`` metadata; the queue is FIFO; a pool the
picker does not know goes to the weights; an unready picker is skipped (fail-open).
"""

from __future__ import annotations

import asyncio
from typing import Any

from trimtab.admission import AdmissionSettings

from .conftest import http_filters, picker_env, pool_cluster

_TYPES = "type.googleapis.com/envoy.extensions"


def _override_sources(config: dict[str, Any]) -> list[dict[str, Any]]:
    policy = pool_cluster(config)["load_balancing_policy"]["policies"][0]
    sources: list[dict[str, Any]] = policy["typed_extension_config"]["typed_config"][
        "override_host_sources"
    ]
    return sources


def _only_metadata(config: dict[str, Any], upstreams: Any) -> None:
    """override_host reads the metadata only; the header the picker sets is dropped too."""
    sources = _override_sources(config)
    sources[:] = [s for s in sources if "metadata" in s]


def _only_header(config: dict[str, Any], upstreams: Any) -> None:
    sources = _override_sources(config)
    sources[:] = [s for s in sources if "header" in s]


async def _served_by(env: Any, count: int, **headers: str) -> list[str]:
    responses = [await env.get(headers=headers) for _ in range(count)]
    assert all(r.status_code == 200 for r in responses), [r.status_code for r in responses]
    return [r.headers["x-served-by"] for r in responses]


async def test_metadata_alone_routes_to_the_pick(tmp_path):
    # The picker knows only "a" while Envoy's EDS holds a, b and c with equal weights: the
    # weights would spread the requests, the pick keeps them on "a".
    async with picker_env(tmp_path, edit=_only_metadata) as env:
        env.update(a=4)
        assert await _served_by(env, 6) == ["a"] * 6
        assert env.metric("trimtab_picker_grants_total") == 6


async def test_header_alone_routes_to_the_pick(tmp_path):
    async with picker_env(tmp_path, edit=_only_header) as env:
        # First request, nothing in flight: ties go by name, so "a" first, then the fallbacks.
        assert await _served_by(env, 1) == ["a"]
        destinations = env.upstreams["a"].destinations
        assert destinations[0].split(",") == [
            env.upstreams["a"].address,
            env.upstreams["b"].address,
            env.upstreams["c"].address,
        ]
        env.update(b=4)
        assert await _served_by(env, 5) == ["b"] * 5


async def test_client_cannot_choose_the_endpoint(tmp_path):
    async with picker_env(tmp_path, edit=_only_header) as env:
        env.update(a=4)  # the picker knows only "a"; a client naming "c" must not win
        forged = {"x-gateway-destination-endpoint": env.upstreams["c"].address}
        assert await _served_by(env, 4, **forged) == ["a"] * 4


async def test_fallback_is_used_when_the_pick_is_down(tmp_path):
    # "a" is picked first (name order) but nothing listens there: Envoy's retry walks the list.
    async with picker_env(tmp_path, listening=("b", "c")) as env:
        assert await _served_by(env, 1) == ["b"]
        # The served endpoint reached the picker (metadata) and differs from the pick.
        await env.settle(
            lambda: env.metric("trimtab_picker_served_elsewhere_total") == 1, what="served"
        )


async def test_served_endpoint_matches_the_pick_and_is_not_leaked(tmp_path):
    async with picker_env(tmp_path) as env:
        response = await env.get()
        assert response.headers["x-served-by"] == "a"
        assert "x-gateway-destination-endpoint-served" not in response.headers
        await env.settle(lambda: env.in_flight()["a"] == 0, what="release")
        assert env.metric("trimtab_picker_served_elsewhere_total") == 0


def _subset_from_header(config: dict[str, Any], upstreams: Any) -> None:
    """The data plane's subset hint, as a comma-separated string from a request header."""
    rule = {
        "header": "x-test-subset",
        "on_header_present": {
            "metadata_namespace": "envoy.lb.subset_hint",
            "key": "x-gateway-destination-endpoint-subset",
            "type": "STRING",
        },
        "remove": True,
    }
    http_filters(config).insert(
        0,
        {
            "name": "envoy.filters.http.header_to_metadata",
            "typed_config": {
                "@type": f"{_TYPES}.filters.http.header_to_metadata.v3.Config",
                "request_rules": [rule],
            },
        },
    )


async def test_subset_hint_as_a_string(tmp_path):
    async with picker_env(tmp_path, edit=_subset_from_header) as env:
        b, c = env.upstreams["b"].address, env.upstreams["c"].address
        assert await _served_by(env, 4, **{"x-test-subset": f"{c}, {b}"}) == ["b"] * 4
        # A bare IP allows that pod on any port.
        assert await _served_by(env, 2, **{"x-test-subset": env.upstreams["c"].ip}) == ["c"] * 2
        missing = await env.get(headers={"x-test-subset": "10.9.9.9:1"})
        assert missing.status_code == 503
        empty = await env.get(headers={"x-test-subset": ","})
        assert empty.status_code == 503


def _subset_list(config: dict[str, Any], upstreams: Any) -> None:
    """The data plane's subset hint as a list value (how control planes write it)."""
    http_filters(config).insert(
        0,
        {
            "name": "envoy.filters.http.set_metadata",
            "typed_config": {
                "@type": f"{_TYPES}.filters.http.set_metadata.v3.Config",
                "metadata": [
                    {
                        "metadata_namespace": "envoy.lb.subset_hint",
                        "value": {
                            "x-gateway-destination-endpoint-subset": [
                                upstreams["c"].address,
                                upstreams["b"].address,
                            ]
                        },
                    }
                ],
            },
        },
    )


async def test_subset_hint_as_a_list(tmp_path):
    async with picker_env(tmp_path, edit=_subset_list) as env:
        assert await _served_by(env, 4) == ["b"] * 4
        env.update(a=4, c=4)  # "b" leaves the picker's pods: only "c" of the list is left
        assert await _served_by(env, 2) == ["c"] * 2


async def test_no_endpoint_is_503(tmp_path):
    async with picker_env(tmp_path) as env:
        env.picker.pools.update(pool="llama", pods=[], settings=env.settings, now=0.0)
        response = await env.get()
        assert response.status_code == 503
        assert response.headers["x-trimtab-refusal"] == "no_endpoint"
        assert env.metric("trimtab_picker_refusals_total", reason="no_endpoint", status="503") == 1


async def test_full_queue_is_429_with_retry_after(tmp_path):
    settings = AdmissionSettings(queue_length=0, retry_after_s=2.5)
    async with picker_env(tmp_path, settings=settings, caps={"a": 1}) as env:
        long = asyncio.create_task(env.get(headers={"x-test-chunks": "100"}))
        await env.settle(lambda: env.in_flight().get("a") == 1, what="the first stream")
        shed = await env.get()
        assert shed.status_code == 429
        assert shed.headers["retry-after"] == "3"
        assert shed.headers["x-trimtab-refusal"] == "queue_full"
        assert (await long).status_code == 200


async def test_queue_ttl_is_429(tmp_path):
    settings = AdmissionSettings(queue_length=8, queue_ttl_s=0.3, retry_after_s=0.2)
    async with picker_env(tmp_path, settings=settings, caps={"a": 1}) as env:
        long = asyncio.create_task(env.get(headers={"x-test-chunks": "150"}))
        await env.settle(lambda: env.in_flight().get("a") == 1, what="the first stream")
        shed = await env.get()
        assert shed.status_code == 429
        assert shed.headers["x-trimtab-refusal"] == "queue_timeout"
        assert shed.headers["retry-after"] == "1"
        assert env.pool.stats().queue_length == 0
        assert (await long).status_code == 200


async def test_queue_is_fifo(tmp_path):
    async with picker_env(tmp_path, caps={"a": 1}) as env:
        first = asyncio.create_task(env.get(headers={"x-test-chunks": "30", "x-test-seq": "0"}))
        await env.settle(lambda: env.in_flight().get("a") == 1, what="the first stream")
        queued = []
        for index in range(1, 5):
            queued.append(asyncio.create_task(env.get(headers={"x-test-seq": str(index)})))
            await env.settle(
                lambda index=index: env.pool.stats().queue_length == index, what="queued"
            )
        results = await asyncio.gather(first, *queued)
        assert [r.status_code for r in results] == [200] * 5
        assert env.upstreams["a"].sequence == ["0", "1", "2", "3", "4"]
        assert env.metric("trimtab_picker_queue_wait_seconds_count", outcome="granted") == 4


async def test_unknown_pool_goes_to_the_weights(tmp_path):
    async with picker_env(tmp_path) as env:
        env.picker.pools.remove(pool="llama")
        # 30 requests: P2C over three equal hosts misses one with odds below 1e-6.
        served = await _served_by(env, 30)
        assert set(served) == {"a", "b", "c"}  # least-request over equal weights, not a pick
        assert (
            env.registry.get_sample_value(
                "trimtab_picker_passthrough_total", {"pool": "llama", "reason": "unknown_pool"}
            )
            == 30
        )


async def test_unready_picker_fails_open_to_the_weights(tmp_path):
    async with picker_env(tmp_path) as env:
        await env.picker.set_ready(False)
        await env.picker_healthy(False)
        served = await _served_by(env, 30)
        assert set(served) == {"a", "b", "c"}
        assert env.metric("trimtab_picker_grants_total") == 0
        await env.picker.set_ready(True)
        await env.picker_healthy(True)
        env.update(b=4)
        # Envoy's workers see the healthy picker a moment after its admin does: wait for the
        # first pick (bounded), then every request is picked again.
        for _ in range(100):
            if env.metric("trimtab_picker_grants_total") > 0:
                break
            await env.get()
            await asyncio.sleep(0.02)
        assert await _served_by(env, 3) == ["b"] * 3
