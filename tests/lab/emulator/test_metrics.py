"""The emulator's ``/metrics`` in every engine's format, read by trimtab's own direct source.

Covered: idle pages read as zero load; under a burst of long prompts running, waiting and KV
usage rise; when the clients hang up the replica drains back to idle. TGI's KV estimate divides
by the budget gauge the emulator exports (the profile's KV capacity), trtllm is read at
``/prometheus/metrics``. The page carries no series a real engine lacks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import httpx
import pytest

from trimtab.api.records import Endpoint, PodName, PodSample, PoolKey
from trimtab.api.spec import Engine
from trimtab.metrics.direct import DirectSource
from trimtab.metrics.engines import profile_for
from trimtab_lab.emulator.exposition import SUPPORTED_ENGINES
from trimtab_lab.emulator.fleet import DEFAULT_MODEL, emulate

PROFILE = "llama3-8b-a10g"
POD = PodName("emulated-0")


async def _until(
    read: Callable[[], Awaitable[PodSample]], ready: Callable[[PodSample], bool]
) -> PodSample:
    for _ in range(200):
        sample = await read()
        if ready(sample):
            return sample
        await asyncio.sleep(0.05)
    raise AssertionError(f"metrics never satisfied the condition; last {sample}")


async def _load(url: str, *, requests: int) -> list[asyncio.Task[None]]:
    body = {"model": DEFAULT_MODEL, "prompt_tokens": 2000, "max_tokens": 5000, "stream": True}

    async def one(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            response.raise_for_status()
            async for _ in response.aiter_bytes():
                pass

    client = httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=requests))

    async def owner() -> None:
        async with client:
            await asyncio.gather(*(one(client) for _ in range(requests)))

    return [asyncio.create_task(owner(), name="load")]


@pytest.mark.parametrize("engine", SUPPORTED_ENGINES, ids=[e.value for e in SUPPORTED_ENGINES])
async def test_load_shows_in_metrics_and_drains(engine: Engine) -> None:
    profile = profile_for(engine=engine)
    source = DirectSource(pool=PoolKey(namespace="t", name="t"), profile=profile, timeout_s=2.0)
    async with emulate(profile=PROFILE, engine=engine, time_scale=5.0) as fleet:
        endpoint = Endpoint(name=POD, address="127.0.0.1", port=fleet.ports[0])

        async def read() -> PodSample:
            return (await source.read(endpoints=[endpoint]))[POD]

        try:
            idle = await read()
            assert (idle.running, idle.waiting, idle.kv_usage) == (0.0, 0.0, 0.0)
            # 30 prompts of 2,000 tokens exceed the 40k-token KV cache: some must queue.
            tasks = await _load(fleet.urls[0], requests=30)
            try:
                busy = await _until(
                    read,
                    lambda s: bool(s.running and s.waiting and s.kv_usage and s.kv_usage > 0.5),
                )
                assert busy.kv_usage is not None and busy.kv_usage <= 1.0
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            drained = await _until(read, lambda s: s.running == 0 and s.waiting == 0)
            assert drained.kv_usage == 0.0
        finally:
            await source.aclose()


async def test_pages_hold_only_real_series() -> None:
    body = {"model": DEFAULT_MODEL, "prompt_tokens": 10, "max_tokens": 3}
    async with emulate(profile=PROFILE, engine=Engine.TGI) as tgi, httpx.AsyncClient() as client:
        done = await client.post(f"{tgi.urls[0]}/v1/completions", json=body)
        done.raise_for_status()
        page = (await client.get(f"{tgi.urls[0]}/metrics")).text
    assert "tgi_request_generated_tokens_total" not in page
    assert "# TYPE tgi_request_generated_tokens histogram" in page
    assert "tgi_request_generated_tokens_sum 3.0" in page
    assert "tgi_request_generated_tokens_count 1.0" in page
    assert 'tgi_request_generated_tokens_bucket{le="+Inf"} 1.0' in page
    assert "tgi_batch_max_total_tokens " in page


async def test_trtllm_serves_prometheus_text_apart_from_its_json_stats() -> None:
    async with (
        emulate(profile=PROFILE, engine=Engine.TRTLLM) as fleet,
        httpx.AsyncClient() as client,
    ):
        text = await client.get(f"{fleet.urls[0]}/prometheus/metrics")
        stats = await client.get(f"{fleet.urls[0]}/metrics")
    assert "trtllm_num_requests_running{" in text.text
    assert "trtllm_generation_tokens_total{" in text.text
    assert stats.headers["content-type"].startswith("application/json")
    assert stats.json() == []
