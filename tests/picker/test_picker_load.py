"""Load and faults with the real Envoy 1.40 (slow): caps hold under concurrency, and a picker
killed mid-run costs no request (Envoy fails open to the weights through override_host).
"""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest

from trimtab.admission import AdmissionSettings

from .conftest import picker_env

pytestmark = pytest.mark.slow


async def _load(env, *, count: int, concurrency: int, headers: dict[str, str]) -> list[object]:
    semaphore = asyncio.Semaphore(concurrency)

    async def one() -> object:
        async with semaphore:
            try:
                return (await env.get(headers=headers)).status_code
            except httpx.HTTPError as exc:
                return repr(exc)

    return list(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), 120))


async def test_caps_are_never_exceeded(tmp_path):
    caps = {"a": 1, "b": 2, "c": 3}
    settings = AdmissionSettings(queue_length=200, queue_ttl_s=60)
    async with picker_env(tmp_path, caps=caps, settings=settings) as env:
        headers = {"x-test-chunks": "5", "x-test-interval-ms": "15"}
        results = await _load(env, count=150, concurrency=24, headers=headers)
        assert results == [200] * 150
        assert {n: u.max_inflight for n, u in env.upstreams.items()} == caps
        await env.settle(lambda: sum(env.in_flight().values()) == 0, what="all released")
        assert env.pool.stats().queued > 0  # the load did queue: the caps were binding


async def test_picker_killed_mid_run_fails_open(tmp_path):
    """The picker Envoy calls is a child process, SIGKILLed while requests stream and queue."""
    children: list[asyncio.subprocess.Process] = []
    caps = {"a": 1, "b": 1, "c": 1}
    async with picker_env(tmp_path, caps=caps, child=children) as env:
        headers = {"x-test-chunks": "8", "x-test-interval-ms": "20"}
        load = asyncio.create_task(_load(env, count=120, concurrency=12, headers=headers))
        await env.settle(lambda: sum(u.served for u in env.upstreams.values()) >= 20, what="load")
        # Until now the child's caps held (1 each), so its queue was holding requests.
        assert {n: u.max_inflight for n, u in env.upstreams.items()} == caps
        children[0].send_signal(signal.SIGKILL)
        results = await load
        assert results == [200] * 120
        await env.picker_healthy(False)
        assert sum(u.served for u in env.upstreams.values()) == 120
