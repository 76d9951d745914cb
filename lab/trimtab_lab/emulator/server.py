"""One emulated replica as an aiohttp server: OpenAI completions, ``/health``, ``/metrics``.

Streaming answers follow OpenAI's server-sent events: one ``data: {json}`` chunk per token as
the replica model releases it, the last token's chunk carrying ``finish_reason: "length"``, an
optional usage chunk (``stream_options.include_usage``), then ``data: [DONE]``. Errors use
OpenAI's body ``{"error": {"message", "type", "param", "code"}}`` with 400, 404 or 405 (a
too-long request in vLLM's wording, which clients match on "maximum context length"); a
client that disconnects frees its batch slot and KV blocks at once, as a real engine does.
With ``prefix_block_tokens`` set the replica caches prompt prefixes (vLLM's automatic prefix
caching) at that block size; a session header (``x-session-id``) is accepted and ignored, as
engines do: only a router uses it.
Response ids are random, so they are unique across replicas and runs. ``/metrics`` (or
``/prometheus/metrics`` for trtllm-serve, whose ``/metrics`` is JSON) serves the engine's page.
"""

from __future__ import annotations

import enum
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from trimtab.api.spec import Engine
from trimtab_lab.emulator.driver import ReplicaDriver, Stream
from trimtab_lab.emulator.exposition import FinishedRequests, metrics_path, render_metrics
from trimtab_lab.emulator.requests import Completion, Kind, RequestError, parse_completion
from trimtab_lab.replica import ReplicaProfile

__all__ = ["ReplicaConfig", "ReplicaServer", "ServerState"]

# In-flight streams get this long to notice the shutdown before aiohttp cancels them.
_SHUTDOWN_TIMEOUT_S = 2.0
_WORDS = ("lorem", "ipsum", "dolor", "sit", "amet", "consectetur", "adipiscing", "elit")


class ServerState(enum.Enum):
    NEW = enum.auto()
    SERVING = enum.auto()
    STOPPED = enum.auto()


@dataclass(frozen=True, kw_only=True)
class ReplicaConfig:
    """What one emulated replica is."""

    engine: Engine
    """Format and names of ``/metrics`` (any but ``custom``)."""
    profile: ReplicaProfile
    model: str
    """The one model name served (``model`` in requests, ``model_name`` in metrics)."""
    speed: float = 1.0
    """Multiplier of the profile's iteration speed; 0.5 is a replica half as fast."""
    time_scale: float = 1.0
    """Model seconds per wall second; 10 runs ten times faster than real time."""
    prefix_block_tokens: int | None = None
    """Prefix caching at this hash-block size (a multiple of the profile's KV block); off when
    ``None``."""


class ReplicaServer:
    """An HTTP server around one :class:`ReplicaDriver`; start, then stop exactly once."""

    def __init__(self, *, config: ReplicaConfig) -> None:
        self.config = config
        self.driver = ReplicaDriver(
            profile=config.profile,
            speed=config.speed,
            time_scale=config.time_scale,
            prefix_block_tokens=config.prefix_block_tokens,
        )
        self.state = ServerState.NEW
        self._finished = FinishedRequests(max_tokens=config.profile.max_model_len)
        self.port = 0
        self._host = "127.0.0.1"
        self._runner: web.AppRunner | None = None
        self.metrics_refused = False
        """While true, ``/metrics`` drops the connection unanswered (a metrics outage: a
        blocked port or a dead exporter) and completions are served as usual."""

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    async def start(self, *, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0: a free port) and return the port."""
        if self.state is not ServerState.NEW:
            raise RuntimeError(f"cannot start a server that is {self.state.name}")
        app = web.Application(middlewares=[_openai_errors])
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        path = metrics_path(engine=self.config.engine)
        app.router.add_get(path, self._metrics)
        if path != "/metrics":
            app.router.add_get("/metrics", self._iteration_stats)
        # handler_cancellation: a client hanging up while its request still waits in the
        # queue must free it at once, not when its first token finds the socket closed.
        runner = web.AppRunner(
            app,
            shutdown_timeout=_SHUTDOWN_TIMEOUT_S,
            access_log=None,
            handler_cancellation=True,
        )
        await runner.setup()
        self._runner = runner
        sock = socket.create_server((host, port), reuse_port=False)
        try:
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self.port = sock.getsockname()[1]
        self._host = host
        self.driver.start()
        self.state = ServerState.SERVING
        return self.port

    async def stop(self) -> None:
        """End open streams, stop the model and close the listener; safe to call twice."""
        if self.state is ServerState.STOPPED:
            return
        self.state = ServerState.STOPPED
        await self.driver.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _health(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def _models(self, request: web.Request) -> web.StreamResponse:
        model = {"id": self.config.model, "object": "model", "owned_by": "trimtab-emulator"}
        return web.json_response({"object": "list", "data": [model]})

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        if self.metrics_refused and request.transport is not None:
            request.transport.abort()
            return web.Response(status=503)
        text = render_metrics(
            engine=self.config.engine,
            state=self.driver.metrics_state(),
            profile=self.config.profile,
            model=self.config.model,
            finished=self._finished,
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _iteration_stats(self, request: web.Request) -> web.StreamResponse:
        # trtllm-serve's JSON iteration stats; the emulator keeps none, so the list is empty.
        return web.json_response([])

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request=request, kind=Kind.COMPLETION)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request=request, kind=Kind.CHAT)

    async def _serve(self, *, request: web.Request, kind: Kind) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            raise RequestError("the request body is not valid JSON") from None
        completion = parse_completion(
            kind=kind,
            body=body,
            models=(self.config.model,),
            prefix_block_tokens=self.config.prefix_block_tokens,
        )
        try:
            stream = self.driver.submit(
                prompt_tokens=completion.prompt_tokens,
                max_tokens=completion.max_tokens,
                block_hashes=completion.block_hashes,
            )
        except ValueError:
            raise _context_length_error(
                completion=completion, max_model_len=self.config.profile.max_model_len
            ) from None
        response_id = f"{'chatcmpl' if completion.kind is Kind.CHAT else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            if completion.stream:
                return await self._stream(
                    request=request, completion=completion, stream=stream, response_id=response_id
                )
            return await self._whole(completion=completion, stream=stream, response_id=response_id)
        finally:
            if stream.finished:
                self._finished.observe(tokens=stream.released)
            self.driver.abandon(stream)

    async def _whole(
        self, *, completion: Completion, stream: Stream, response_id: str
    ) -> web.StreamResponse:
        await stream.wait(seen=stream.max_tokens)
        if not stream.finished:
            raise RequestError("the replica shut down", status=503, kind="server_error")
        text = "".join(_token(i) for i in range(stream.released))
        if completion.kind is Kind.CHAT:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return web.json_response(
            {
                **_envelope(completion=completion, response_id=response_id, chunk=False),
                "choices": [choice],
                "usage": _usage(completion=completion, generated=stream.released),
            }
        )

    async def _stream(
        self, *, request: web.Request, completion: Completion, stream: Stream, response_id: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        seen = 0
        try:
            # Bounded: every pass sends at least one token or ends the stream.
            while seen < stream.max_tokens and not stream.cancelled:
                await stream.wait(seen=seen)
                for index in range(seen, stream.released):
                    chunk = _chunk(
                        completion=completion, stream=stream, response_id=response_id, index=index
                    )
                    await response.write(_event(chunk))
                seen = max(seen, stream.released)
            if completion.include_usage and not stream.cancelled:
                usage = _usage(completion=completion, generated=seen)
                envelope = _envelope(completion=completion, response_id=response_id, chunk=True)
                await response.write(_event({**envelope, "choices": [], "usage": usage}))
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
        except ConnectionResetError:
            pass
        return response


@web.middleware
async def _openai_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every error leaves in OpenAI's shape, including aiohttp's own 404 and 405."""
    try:
        return await handler(request)
    except RequestError as exc:
        return web.json_response(exc.body(), status=exc.status)
    except web.HTTPMethodNotAllowed as exc:
        error = RequestError(f"method {request.method} not allowed on {request.path}")
        return web.json_response(
            error.body(), status=405, headers={"Allow": ",".join(sorted(exc.allowed_methods))}
        )
    except web.HTTPNotFound:
        error = RequestError(f"no route {request.path}", status=404, code="not_found")
        return web.json_response(error.body(), status=404)


def _token(index: int) -> str:
    return " " + _WORDS[index % len(_WORDS)]


def _context_length_error(*, completion: Completion, max_model_len: int) -> RequestError:
    """vLLM's refusal of a request longer than the context (serving_engine, 0.6 to 0.10)."""
    prompt, output = completion.prompt_tokens, completion.max_tokens
    return RequestError(
        f"This model's maximum context length is {max_model_len} tokens. However, you "
        f"requested {prompt + output} tokens ({prompt} in the messages, {output} in the "
        "completion). Please reduce the length of the messages or completion.",
        param="max_tokens",
        code="context_length_exceeded",
    )


def _envelope(*, completion: Completion, response_id: str, chunk: bool) -> dict[str, Any]:
    chat = completion.kind is Kind.CHAT
    kinds = ("chat.completion.chunk", "chat.completion") if chat else ("text_completion",) * 2
    return {
        "id": response_id,
        "object": kinds[0] if chunk else kinds[1],
        "created": int(time.time()),
        "model": completion.model,
    }


def _chunk(
    *, completion: Completion, stream: Stream, response_id: str, index: int
) -> dict[str, Any]:
    last = index + 1 == stream.max_tokens
    finish = "length" if last else None
    if completion.kind is Kind.CHAT:
        delta = {"role": "assistant", "content": _token(index)} if index == 0 else None
        choice: dict[str, Any] = {
            "index": 0,
            "delta": delta or {"content": _token(index)},
            "logprobs": None,
            "finish_reason": finish,
        }
    else:
        choice = {"index": 0, "text": _token(index), "logprobs": None, "finish_reason": finish}
    envelope = _envelope(completion=completion, response_id=response_id, chunk=True)
    return {**envelope, "choices": [choice]}


def _usage(*, completion: Completion, generated: int) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": generated,
        "total_tokens": completion.prompt_tokens + generated,
    }


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
