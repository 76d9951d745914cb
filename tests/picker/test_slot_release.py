"""A granted slot is held for the whole streamed response and released exactly once, however
the request ends, with the real Envoy 1.40 (response trailers SEND, bodies NONE).

Each case records which end of the ext_proc stream released the slot
(``trimtab_picker_stream_ends_total{end}``): Envoy half-closes the stream when a streamed
response ends normally and when the client aborts; an upstream reset mid-stream ends in a
half-close too, and so does a replica killed mid-stream (measured here: every case ends in
``half_close``, never a cancel). The admission records every release, so "exactly once" is
checked per id.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import httpx
import pytest

from trimtab.admission import Admission, AdmissionSettings, Grant

from .conftest import picker_env


class RecordingAdmission(Admission):
    """The real admission, recording every grant handed out and every release asked for."""

    def __init__(self, *, settings: AdmissionSettings) -> None:
        super().__init__(settings=settings)
        self.granted: list[str] = []
        self.releases: Counter[str] = Counter()

    def ask(self, **kwargs: Any) -> Any:
        outcome = super().ask(**kwargs)
        if isinstance(outcome, Grant):
            self.granted.append(outcome.id)
        return outcome

    def release(self, **kwargs: Any) -> Any:
        self.releases[kwargs["id"]] += 1
        return super().release(**kwargs)


@pytest.fixture
def recorded() -> list[RecordingAdmission]:
    return []


def _factory(recorded: list[RecordingAdmission]) -> Any:
    def make(settings: AdmissionSettings) -> Admission:
        admission = RecordingAdmission(settings=settings)
        recorded.append(admission)
        return admission

    return make


def _ends(env: Any) -> dict[str, float]:
    return {
        end: env.metric("trimtab_picker_stream_ends_total", end=end)
        for end in ("half_close", "cancelled", "error")
        if env.metric("trimtab_picker_stream_ends_total", end=end)
    }


async def _released_once(env: Any, admission: RecordingAdmission) -> None:
    await env.settle(lambda: sum(env.in_flight().values()) == 0, what="the slot released")
    assert admission.granted, "nothing was granted"
    assert {id: admission.releases[id] for id in admission.granted} == dict.fromkeys(
        admission.granted, 1
    )


async def test_normal_end_of_a_stream(tmp_path, recorded):
    async with picker_env(tmp_path, caps={"a": 2}, factory=_factory(recorded)) as env:
        headers = {"x-test-chunks": "20", "x-test-interval-ms": "20"}
        async with env.client.stream("POST", env.url, content=b"{}", headers=headers) as reply:
            chunks = reply.aiter_raw()
            await anext(chunks)
            # Response headers and a first chunk are through: the slot is still held.
            assert env.in_flight() == {"a": 1}
            async for _ in chunks:
                pass
        await _released_once(env, recorded[0])
        assert _ends(env) == {"half_close": 1}


async def test_client_abort(tmp_path, recorded):
    async with picker_env(tmp_path, caps={"a": 2}, factory=_factory(recorded)) as env:
        headers = {"x-test-chunks": "500", "x-test-interval-ms": "20"}
        async with env.client.stream("POST", env.url, content=b"{}", headers=headers) as reply:
            await anext(reply.aiter_raw())
            assert env.in_flight() == {"a": 1}
        # Leaving the block closes the connection mid-stream (httpx cannot reuse it).
        await _released_once(env, recorded[0])
        assert _ends(env) == {"half_close": 1}
        assert env.upstreams["a"].served == 0


async def test_upstream_reset_mid_stream(tmp_path, recorded):
    async with picker_env(tmp_path, caps={"a": 2}, factory=_factory(recorded)) as env:
        headers = {"x-test-chunks": "50", "x-test-reset-after": "3"}
        with pytest.raises(httpx.RemoteProtocolError):
            async with env.client.stream("POST", env.url, content=b"{}", headers=headers) as reply:
                async for _ in reply.aiter_raw():
                    pass
        await _released_once(env, recorded[0])
        assert _ends(env) == {"half_close": 1}


async def test_replica_killed_mid_stream(tmp_path, recorded):
    async with picker_env(tmp_path, caps={"a": 2}, factory=_factory(recorded)) as env:
        headers = {"x-test-chunks": "500", "x-test-interval-ms": "20"}
        with pytest.raises(httpx.RemoteProtocolError):
            async with env.client.stream("POST", env.url, content=b"{}", headers=headers) as reply:
                chunks = reply.aiter_raw()
                await anext(chunks)
                await env.upstreams["a"].stop()
                async for _ in chunks:
                    pass
        await _released_once(env, recorded[0])
        # Envoy half-closes the ext_proc stream on the upstream reset; on a busy machine its
        # reset can reach the picker first as a cancel. Either way the slot is freed once.
        assert _ends(env) in ({"half_close": 1}, {"cancelled": 1})


async def test_refused_and_queued_requests_hold_nothing(tmp_path, recorded):
    settings = AdmissionSettings(queue_length=1, queue_ttl_s=0.2)
    async with picker_env(
        tmp_path, caps={"a": 1}, settings=settings, factory=_factory(recorded)
    ) as env:
        headers = {"x-test-chunks": "60", "x-test-interval-ms": "10"}
        async with env.client.stream("POST", env.url, content=b"{}", headers=headers) as reply:
            # Keep the iterator: a dropped one closes the response (a client abort).
            chunks = reply.aiter_raw()
            await anext(chunks)
            assert (await env.get()).status_code == 429  # waited out the TTL
            async for _ in chunks:
                pass
        await _released_once(env, recorded[0])
        assert len(recorded[0].granted) == 1
