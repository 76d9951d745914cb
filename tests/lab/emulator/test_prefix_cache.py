"""The emulator's prefix cache over real HTTP: hashed prompts, the engines' cache counters.

Covered: a repeated prompt is a hit counted in vLLM's ``prefix_cache_*`` counters and SGLang's
``prompt_tokens``/``cached_tokens`` counters, which trimtab's direct metrics source turns into
a hit rate; a chat turn that extends the previous turn hits the previous turn's blocks; a
session header is accepted and changes nothing; with prefix caching off nothing is counted.
"""

from __future__ import annotations

import httpx
import pytest

from trimtab.api.records import Endpoint, PodName, PoolKey
from trimtab.api.spec import Engine
from trimtab.metrics.direct import DirectSource
from trimtab.metrics.engines import profile_for
from trimtab_lab.emulator.fleet import DEFAULT_MODEL, emulate

BLOCK = 16
# 2,000 characters are 500 tokens: 31 full blocks of 16 tokens (64 characters).
PROMPT = "".join(f"{i:07d} " for i in range(250))
POD = PodName("emulated-0")


def counter(page: str, name: str) -> float:
    (line,) = [line for line in page.splitlines() if line.startswith(name + "{")]
    return float(line.rsplit(" ", 1)[1])


async def complete(client: httpx.AsyncClient, url: str, **extra: object) -> None:
    body = {"model": DEFAULT_MODEL, "prompt": PROMPT, "max_tokens": 2, **extra}
    response = await client.post(f"{url}/v1/completions", json=body)
    response.raise_for_status()


@pytest.mark.parametrize(
    ("engine", "queries", "hits"),
    [
        (Engine.VLLM, "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
        (Engine.SGLANG, "sglang:prompt_tokens_total", "sglang:cached_tokens_total"),
    ],
)
async def test_a_repeated_prompt_is_counted_as_a_hit(engine, queries, hits) -> None:
    async with (
        emulate(engine=engine, time_scale=20.0, prefix_block_tokens=BLOCK) as fleet,
        httpx.AsyncClient(timeout=30) as client,
    ):
        url = fleet.urls[0]
        await complete(client, url)
        await complete(client, url, stream=False)
        page = (await client.get(f"{url}/metrics")).text
    assert counter(page, queries) == 1000.0
    # 31 full blocks of the second request were cached by the first.
    assert counter(page, hits) == 31 * BLOCK


async def test_trimtab_reads_the_hit_rate_from_the_emulator() -> None:
    source = DirectSource(
        pool=PoolKey(namespace="t", name="t"), profile=profile_for(engine=Engine.VLLM), timeout_s=2
    )
    try:
        async with (
            emulate(time_scale=20.0, prefix_block_tokens=BLOCK) as fleet,
            httpx.AsyncClient(timeout=30) as client,
        ):
            endpoint = Endpoint(name=POD, address="127.0.0.1", port=fleet.ports[0])
            await source.read(endpoints=[endpoint])
            await complete(client, fleet.urls[0])
            await complete(client, fleet.urls[0], stream=False)
            sample = (await source.read(endpoints=[endpoint]))[POD]
    finally:
        await source.aclose()
    assert sample.prefix_hit_rate == pytest.approx(31 * BLOCK / 1000)


async def test_a_chat_turn_hits_the_previous_turns_blocks() -> None:
    first = [{"role": "system", "content": PROMPT}, {"role": "user", "content": "hello " * 40}]
    second = [*first, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "more"}]
    async with (
        emulate(time_scale=20.0, prefix_block_tokens=BLOCK) as fleet,
        httpx.AsyncClient(timeout=30) as client,
    ):
        url = fleet.urls[0]
        for messages in (first, second):
            body = {"model": DEFAULT_MODEL, "messages": messages, "max_tokens": 2}
            response = await client.post(
                f"{url}/v1/chat/completions", json=body, headers={"x-session-id": "c-1"}
            )
            response.raise_for_status()
        page = (await client.get(f"{url}/metrics")).text
    # The first turn hashes "system\n" + 2,000 characters + "\n" + "user\n" + 240 + "\n":
    # 2,254 characters, 35 full blocks of 64, all of them a prefix of the second turn.
    assert counter(page, "vllm:prefix_cache_hits_total") == 35 * BLOCK


async def test_without_prefix_caching_nothing_is_counted() -> None:
    async with emulate(time_scale=20.0) as fleet, httpx.AsyncClient(timeout=30) as client:
        await complete(client, fleet.urls[0])
        await complete(client, fleet.urls[0])
        page = (await client.get(f"{fleet.urls[0]}/metrics")).text
    assert counter(page, "vllm:prefix_cache_queries_total") == 0.0
    assert counter(page, "vllm:prefix_cache_hits_total") == 0.0


async def test_a_block_size_the_kv_blocks_cannot_tile_is_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 16"):
        async with emulate(prefix_block_tokens=24):
            pass
