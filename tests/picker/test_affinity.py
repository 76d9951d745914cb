"""Prefix affinity through the real Envoy 1.40: the picker reads the prompt, then picks.

The picker asks Envoy for the request body (``mode_override`` to ``BUFFERED_PARTIAL``, which the
bootstrap allows), hashes the chat prompt into blocks and answers the body message; Envoy must
honour the destination set then. The same prefix goes to the same pod while that pod stays
within the load bound, and spills to others when it would not; a session header is enough
without a body.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from typing import Any

import httpx

from trimtab.admission import AdmissionSettings, AffinityMode
from trimtab.picker.protocol import BODY_MODE
from trimtab.targets.bootstrap import PICKER_BODY_MODE

from .conftest import (
    PickerEnv,
    SseUpstream,
    http_filters,
    picker_bootstrap,
    picker_env,
    pool_spec,
)

FACTOR = 1.5
SETTINGS = AdmissionSettings(
    affinity=AffinityMode.PREFIX, affinity_block_tokens=16, affinity_load_factor=FACTOR
)
SYSTEM = "You are a careful assistant who answers in one line. " * 20  # ~16 blocks of 64 chars


def chat(question: str, *, system: str = SYSTEM) -> bytes:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ],
    }
    return json.dumps(body).encode()


async def post(env: PickerEnv, body: bytes, **headers: str) -> httpx.Response:
    return await env.client.post(
        env.url, content=body, headers={"content-type": "application/json", **headers}
    )


def served(env: PickerEnv) -> dict[str, int]:
    return {name: upstream.served for name, upstream in env.upstreams.items()}


def _total_is(env: PickerEnv, count: int) -> Callable[[], bool]:
    return lambda: sum(env.in_flight().values()) == count


def test_the_bootstrap_allows_exactly_the_mode_the_picker_asks_for(tmp_path: Any) -> None:
    assert PICKER_BODY_MODE == BODY_MODE
    config = picker_bootstrap(
        picker_port=9002,
        eds_dir=tmp_path,
        spec=pool_spec([SseUpstream(name="a", ip="127.0.0.2", port=8000)]),
    )
    ext_proc = http_filters(config)[1]["typed_config"]
    assert ext_proc["allow_mode_override"] is True
    assert ext_proc["allowed_override_modes"] == [BODY_MODE]
    assert ext_proc["processing_mode"]["request_body_mode"] == "NONE"


async def test_same_prefix_goes_to_the_same_pod(tmp_path: Any) -> None:
    async with picker_env(tmp_path, settings=SETTINGS, caps={"a": 8, "b": 8, "c": 8}) as env:
        for n in range(6):
            response = await post(env, chat(f"question {n}?"), **{"x-test-chunks": "1"})
            assert response.status_code == 200, response.text
        counts = served(env)
        assert sorted(counts.values()) == [0, 0, 6], counts
        assert env.metric("trimtab_picker_picks_total", reason="hit") == 5
        assert env.metric("trimtab_picker_picks_total", reason="miss") == 1
        # Every hit skips the system prompt's whole blocks (16 tokens each).
        assert env.metric("trimtab_picker_prefix_hit_tokens_total") >= 5 * 16 * 10
        # The destination was set while answering the body: the upstream saw it.
        pod = max(counts, key=counts.__getitem__)
        destinations = env.upstreams[pod].destinations
        assert all(d.split(",")[0] == env.upstreams[pod].address for d in destinations)


async def test_spills_when_the_cached_pod_is_over_the_bound(tmp_path: Any) -> None:
    async with picker_env(tmp_path, settings=SETTINGS, caps={"a": 8, "b": 8, "c": 8}) as env:
        first = await post(env, chat("warm up?"), **{"x-test-chunks": "1"})
        assert first.status_code == 200
        cached = max(served(env), key=served(env).__getitem__)
        slow = {"x-test-chunks": "100", "x-test-interval-ms": "50"}
        # Sent one by one, each while the earlier ones still stream: loads are known exactly.
        tasks = []
        for n in range(9):
            tasks.append(asyncio.create_task(post(env, chat(f"held {n}?"), **slow)))
            await env.settle(_total_is(env, n + 1), what=f"{n + 1} in flight")
        loads = env.in_flight()
        answers = await asyncio.gather(*tasks)
        assert all(answer.status_code == 200 for answer in answers)
        assert env.metric("trimtab_picker_affinity_guard_trips_total") > 0
        assert env.metric("trimtab_picker_picks_total", reason="load_guard") > 0
        least = min(loads.values())
        assert loads[cached] <= math.ceil(FACTOR * (least + 1)), loads
        # It spilled; the pods it spilled to hold the prefix too now, so the load evens out.
        assert all(loads.values()), loads
        assert env.metric("trimtab_picker_picks_total", reason="hit") >= 2
        assert env.upstreams[cached].max_inflight <= math.ceil(FACTOR * (least + 1))


async def test_a_session_header_is_enough(tmp_path: Any) -> None:
    async with picker_env(tmp_path, settings=SETTINGS, caps={"a": 8, "b": 8, "c": 8}) as env:
        for n in range(4):
            other = f"unrelated prompt {n} " * 30
            response = await post(
                env,
                chat(f"turn {n}", system=other),
                **{"x-session-id": "conversation-7", "x-test-chunks": "1"},
            )
            assert response.status_code == 200
        assert sorted(served(env).values()) == [0, 0, 4]
        assert env.metric("trimtab_picker_picks_total", reason="hit") == 3


async def test_affinity_off_picks_at_the_headers(tmp_path: Any) -> None:
    async with picker_env(tmp_path, caps={"a": 8, "b": 8, "c": 8}) as env:
        response = await post(env, chat("plain"), **{"x-test-chunks": "1"})
        assert response.status_code == 200
        assert env.metric("trimtab_picker_picks_total", reason="normal") == 1
