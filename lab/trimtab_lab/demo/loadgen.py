"""A streaming load generator: replays arrivals as real OpenAI-style HTTP requests.

Each request is sent at its arrival time (already time-compressed by the caller) with
``stream: true``; TTFT is the time to the first SSE ``data:`` chunk, end-to-end the time to
``[DONE]``. The run is bounded in count (the arrivals given) and in time (``deadline_s``):
requests still open at the deadline are cancelled and counted as cut (status -1). Chunks are
read as raw bytes, never parsed as JSON: at thousands of tokens a second, per-line parsing
would make the load generator, not the balancer, the bottleneck of the measurement.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from trimtab.picker.protocol import PROMPT_TOKENS_HEADER

__all__ = ["Outcome", "RequestSpec", "replay"]

_DATA = b"data:"
_DONE = b"data: [DONE]"


@dataclass(frozen=True, kw_only=True)
class RequestSpec:
    arrival_s: float
    """Seconds after the start of the run at which to send the request."""
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True, kw_only=True)
class Outcome:
    arrival_s: float
    """Seconds after the start of the run at which the request was sent."""
    output_tokens: int
    ttft_s: float | None
    """Seconds to the first streamed chunk; ``None`` when none came."""
    e2e_s: float | None
    """Seconds to the end of the stream; ``None`` when it did not finish."""
    status: int
    """HTTP status; 0 for a transport error, -1 for a request cut by the deadline."""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.e2e_s is not None


async def _one(
    *,
    client: httpx.AsyncClient,
    url: str,
    model: str,
    spec: RequestSpec,
    start: float,
    on_first: Callable[[float], None],
) -> Outcome:
    loop = asyncio.get_running_loop()
    body = {
        "model": model,
        "prompt": "x",
        "prompt_tokens": spec.prompt_tokens,
        "max_tokens": spec.output_tokens,
        "stream": True,
    }
    # The picker sizes a request's KV footprint from this header (the body's prompt is a stub).
    headers = {PROMPT_TOKENS_HEADER: str(spec.prompt_tokens)}
    sent = loop.time()
    ttft: float | None = None

    def unfinished(*, status: int, error: str) -> Outcome:
        return Outcome(
            arrival_s=sent - start,
            output_tokens=spec.output_tokens,
            ttft_s=ttft,
            e2e_s=None,
            status=status,
            error=error,
        )

    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                return unfinished(status=response.status_code, error=response.text[:200])
            # The last bytes seen, so a [DONE] split across two reads is still found.
            tail = b""
            async for chunk in response.aiter_raw():
                if ttft is None and _DATA in tail + chunk:
                    ttft = loop.time() - sent
                    on_first(ttft)
                tail = (tail + chunk)[-len(_DONE) - 2 :]
        if _DONE not in tail:
            return unfinished(status=0, error="stream ended without [DONE]")
        return Outcome(
            arrival_s=sent - start,
            output_tokens=spec.output_tokens,
            ttft_s=ttft,
            e2e_s=loop.time() - sent,
            status=200,
        )
    except httpx.HTTPError as exc:
        return unfinished(status=0, error=type(exc).__name__)


async def replay(
    *,
    url: str,
    model: str,
    requests: Sequence[RequestSpec],
    deadline_s: float,
    max_connections: int = 2048,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Send ``requests`` on schedule to ``url``; return one outcome per request, in order.

    ``on_done`` is called with each outcome as it completes (for live progress).
    """
    loop = asyncio.get_running_loop()
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=256)
    timeout = httpx.Timeout(connect=5.0, read=deadline_s, write=5.0, pool=deadline_s)
    outcomes: list[Outcome | None] = [None] * len(requests)
    # TTFT of requests still streaming, so those cut by the deadline keep it.
    first: list[float | None] = [None] * len(requests)
    async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
        start = loop.time()

        async def fire(index: int, spec: RequestSpec) -> None:
            await asyncio.sleep(max(0.0, start + spec.arrival_s - loop.time()))

            def mark(ttft: float) -> None:
                first[index] = ttft

            outcome = await _one(
                client=client, url=url, model=model, spec=spec, start=start, on_first=mark
            )
            outcomes[index] = outcome
            if on_done is not None:
                on_done(outcome)

        tasks = [
            asyncio.create_task(fire(i, spec), name=f"loadgen-{i}")
            for i, spec in enumerate(requests)
        ]
        try:
            await asyncio.wait(tasks, timeout=max(0.0, start + deadline_s - loop.time()))
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return [
        outcome
        if outcome is not None
        else Outcome(
            arrival_s=spec.arrival_s,
            output_tokens=spec.output_tokens,
            ttft_s=ttft,
            e2e_s=None,
            status=-1,
            error="deadline",
        )
        for outcome, spec, ttft in zip(outcomes, requests, first, strict=True)
    ]
