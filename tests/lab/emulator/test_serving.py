"""The emulator over real HTTP: streaming, timing against the replica model, errors, shutdown.

Covered: completions and chat, streaming and not, token counts, that tokens never arrive
before the model says they exist (time scale included), OpenAI error bodies (400/404/405),
vLLM's context-length wording, ``n`` other than 1 refused, response ids unique across
replicas, client disconnects freeing the replica, and a clean stop with streams open.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from trimtab_lab.emulator.fleet import DEFAULT_MODEL, emulate
from trimtab_lab.replica import Replica, get_profile

MODEL = DEFAULT_MODEL


async def _sse(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> list[Any]:
    """Every ``data:`` payload of a streamed answer, decoded (``[DONE]`` kept as a string)."""
    events: list[Any] = []
    async with client.stream("POST", url, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                payload = line.removeprefix("data: ")
                events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


async def test_streamed_completion_has_one_chunk_per_token() -> None:
    async with emulate() as fleet, httpx.AsyncClient(timeout=30) as client:
        events = await _sse(
            client,
            f"{fleet.urls[0]}/v1/completions",
            {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 7, "stream": True},
        )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert len(chunks) == 7
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 6 + ["length"]
    assert all(c["object"] == "text_completion" for c in chunks)


async def test_streamed_chat_starts_with_role_and_ends_with_usage() -> None:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 3,
        "prompt_tokens": 500,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with emulate() as fleet, httpx.AsyncClient(timeout=30) as client:
        events = await _sse(client, f"{fleet.urls[0]}/v1/chat/completions", body)
    chunks, usage, done = events[:-2], events[-2], events[-1]
    assert done == "[DONE]"
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert len(chunks) == 3
    assert usage["usage"] == {"prompt_tokens": 500, "completion_tokens": 3, "total_tokens": 503}


async def test_whole_answer_counts_prompt_characters() -> None:
    body = {"model": MODEL, "prompt": "x" * 400, "max_tokens": 4}
    async with emulate() as fleet, httpx.AsyncClient(timeout=30) as client:
        answer = (await client.post(f"{fleet.urls[0]}/v1/completions", json=body)).json()
    assert answer["usage"] == {"prompt_tokens": 100, "completion_tokens": 4, "total_tokens": 104}
    assert len(answer["choices"][0]["text"].split()) == 4


@pytest.mark.parametrize("time_scale", [1.0, 4.0])
async def test_tokens_never_arrive_before_the_model_produces_them(time_scale: float) -> None:
    profile = get_profile("llama3-8b-a10g")
    model = Replica(profile=profile)
    model.submit(request_id=1, prompt_tokens=1000, output_tokens=8, at_s=0.0)
    steps = 0
    while model.step() is not None and steps < 1000:
        steps += 1
    model_seconds = model.now

    body = {"model": MODEL, "prompt_tokens": 1000, "prompt": "", "max_tokens": 8, "stream": True}
    async with (
        emulate(profile="llama3-8b-a10g", time_scale=time_scale) as fleet,
        httpx.AsyncClient(timeout=30) as client,
    ):
        started = time.monotonic()
        events = await _sse(client, f"{fleet.urls[0]}/v1/completions", body)
        elapsed = time.monotonic() - started
    assert len(events) == 9
    # The driver sleeps to absolute model times and may release up to 1 ms early.
    assert elapsed >= model_seconds / time_scale - 0.001


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param"),
    [
        ("POST", "/v1/completions", {"prompt": "hi"}, 400, "model"),
        ("POST", "/v1/completions", {"model": "other", "prompt": "hi"}, 404, "model"),
        ("POST", "/v1/completions", {"model": MODEL}, 400, "prompt"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 0}, 400, "max_tokens"),  # noqa: E501
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 10**6}, 400, "max_tokens"),  # noqa: E501
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "a", "stream": "yes"}, 400, "stream"),  # noqa: E501
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
        ("POST", "/v1/chat/completions", [1, 2], 400, None),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "a", "n": 2}, 400, "n"),
        ("POST", "/v1/completions", {"model": MODEL, "prompt": "a", "n": True}, 400, "n"),
        ("GET", "/v1/completions", None, 405, None),
        ("POST", "/v1/embeddings", {"model": MODEL}, 404, None),
    ],
)  # fmt: skip
async def test_bad_requests_get_openai_errors(
    method: str, path: str, body: Any, status: int, param: str | None
) -> None:
    async with emulate() as fleet, httpx.AsyncClient(timeout=10) as client:
        response = await client.request(method, f"{fleet.urls[0]}{path}", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert set(error) == {"message", "type", "param", "code"}


async def test_too_long_request_reads_like_vllm() -> None:
    async with emulate() as fleet, httpx.AsyncClient(timeout=10) as client:
        limit = fleet.servers[0].config.profile.max_model_len
        body = {"model": MODEL, "prompt_tokens": limit - 5, "max_tokens": 10}
        response = await client.post(f"{fleet.urls[0]}/v1/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    # Clients (openai, LangChain, inference-perf) match on "maximum context length".
    assert error["message"] == (
        f"This model's maximum context length is {limit} tokens. However, you requested "
        f"{limit + 5} tokens ({limit - 5} in the messages, 10 in the completion). Please "
        "reduce the length of the messages or completion."
    )
    assert error["code"] == "context_length_exceeded"


async def test_response_ids_are_unique_across_replicas() -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    ids: list[str] = []
    async with emulate(replicas=2) as fleet, httpx.AsyncClient(timeout=10) as client:
        for url in fleet.urls * 2:
            whole = await client.post(
                f"{url}/v1/chat/completions",
                json={**body, "messages": [{"role": "user", "content": "hi"}]},
            )
            ids.append(whole.json()["id"])
            events = await _sse(client, f"{url}/v1/completions", {**body, "stream": True})
            streamed = {e["id"] for e in events if isinstance(e, dict)}
            assert len(streamed) == 1
            ids.extend(streamed)
    assert len(set(ids)) == len(ids) == 8
    assert all(i.startswith(("chatcmpl-", "cmpl-")) for i in ids)


async def test_invalid_json_is_a_400() -> None:
    async with emulate() as fleet, httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"{fleet.urls[0]}/v1/completions", content=b"{nope")
    assert response.status_code == 400


async def test_health_and_models() -> None:
    async with emulate() as fleet, httpx.AsyncClient(timeout=10) as client:
        health = await client.get(f"{fleet.urls[0]}/health")
        models = (await client.get(f"{fleet.urls[0]}/v1/models")).json()
    assert health.status_code == 200
    assert [m["id"] for m in models["data"]] == [MODEL]


async def test_stop_ends_open_streams_and_frees_the_port() -> None:
    body = {"model": MODEL, "prompt": "go", "max_tokens": 100_000, "stream": True}
    received: list[str] = []

    async def consume(url: str) -> None:
        async with (
            httpx.AsyncClient(timeout=30) as client,
            client.stream("POST", f"{url}/v1/completions", json=body) as response,
        ):
            async for line in response.aiter_lines():
                received.append(line)

    async with emulate() as fleet:
        url = fleet.urls[0]
        reader = asyncio.create_task(consume(url), name="stream-reader")
        for _ in range(200):
            if received:
                break
            await asyncio.sleep(0.05)
        assert received
    # Leaving the block must end the stream rather than leave the client waiting.
    await asyncio.wait_for(reader, timeout=10)
    assert fleet.servers[0].driver.state.name == "STOPPED"
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient(timeout=2) as client:
            await client.get(f"{url}/health")
