"""The ext_proc ``ExternalProcessor`` service: one stream per HTTP request, one slot per grant.

Envoy opens a stream per request and sends its request headers; the picker answers with the
chosen endpoint (and fallbacks), or an immediate 503/429, possibly after waiting in the pool's
shared queue. The slot is held until the stream ends. With ``response_trailer_mode: SEND`` and
bodies ``NONE`` (the bootstrap's processing mode) Envoy keeps the stream open for the whole
response and half-closes it when the response ends; a client abort or an upstream reset ends
it too (half-close or cancel). Every one of those ends runs the handler's ``finally``, which
releases the slot: exactly once, because the admission's release is idempotent and the handler
calls it in one place.

For a pool with prefix affinity the pick needs the prompt: unless an ``x-session-id`` header
names the conversation (then the session is enough and the pick happens at the headers), the
headers answer asks Envoy for the body (``mode_override`` to :data:`protocol.BODY_MODE`, the body
buffered, which the bootstrap allows), and the pick answers the body message, whose header
mutation still applies because Envoy holds the headers while it buffers. A request whose body
never comes (Envoy without the override allowed) goes on without a pick, to the weights.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from trimtab.admission import AffinityMode, Ask, Grant, PickReason, RequestId
from trimtab.picker import protocol, telemetry
from trimtab.picker.pools import PickerPool, PickerPools
from trimtab.picker.prompts import prompt_prefix

__all__ = ["ExternalProcessor"]

logger = logging.getLogger("trimtab.picker")


@dataclass(frozen=True, kw_only=True)
class _Held:
    pool: PickerPool
    grant: Grant


@dataclass(frozen=True, kw_only=True)
class _Pending:
    """A request of an affinity pool whose pick waits for its body."""

    pool: PickerPool
    head: protocol.RequestHead
    hint: tuple[str, ...] | None


class ExternalProcessor(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Answers Envoy's ext_proc streams from :class:`PickerPools`."""

    def __init__(self, *, pools: PickerPools, metrics: telemetry.PickerMetrics) -> None:
        self._pools = pools
        self._metrics = metrics
        self._ids = itertools.count(1)

    async def Process(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        pool_name = _metadata_pool(context)
        held: _Held | None = None
        pending: _Pending | None = None
        end = telemetry.StreamEnd.ERROR
        try:
            async for request in request_iterator:
                kind = request.WhichOneof("request")
                if kind == "request_headers" and held is None and pending is None:
                    response, held, pending = await self._on_headers(
                        request=request, pool_name=pool_name
                    )
                elif kind == "request_body" and pending is not None:
                    body = request.request_body.body
                    settings = pending.pool.settings
                    prefix = prompt_prefix(
                        body=body,
                        block_tokens=settings.affinity_block_tokens,
                        chars_per_token=max(1, round(settings.bytes_per_token)),
                        max_bytes=settings.affinity_max_prefix_bytes,
                    )
                    response, held = await self._admit(
                        pool=pending.pool,
                        head=pending.head,
                        hint=pending.hint,
                        prefix=prefix,
                        phase="request_body",
                    )
                    pending = None
                elif kind == "response_headers":
                    if pending is not None:
                        self._metrics.passthrough.labels(
                            pending.pool.name, telemetry.PassthroughReason.NO_BODY.value
                        ).inc()
                        pending = None
                    if held is not None:
                        self._check_served(request=request, held=held)
                    response = protocol.continue_response(kind=kind, remove=[protocol.SERVED_KEY])
                else:
                    response = protocol.continue_response(kind=kind)
                await context.write(response)
            end = telemetry.StreamEnd.HALF_CLOSE
        except asyncio.CancelledError:
            end = telemetry.StreamEnd.CANCELLED
            raise
        finally:
            if held is not None:
                held.pool.release(id=held.grant.id)
                self._metrics.stream_ends.labels(held.pool.name, end.value).inc()

    async def _on_headers(
        self, *, request: Any, pool_name: str | None
    ) -> tuple[Any, _Held | None, _Pending | None]:
        head = protocol.parse_request_head(request.request_headers)
        name = pool_name or head.pool
        hint = protocol.subset_hint(request.metadata_context)
        pool = self._pools.get(name)
        if name is None and hint is not None:
            # A GIE gateway names no pool, but its subset hint lists the pool's endpoints.
            pool = self._pools.holding(hint) or pool
        if pool is None:
            self._metrics.passthrough.labels(
                name or "", telemetry.PassthroughReason.UNKNOWN_POOL.value
            ).inc()
            return protocol.continue_request(), None, None
        settings = pool.settings
        if (
            settings.affinity is AffinityMode.PREFIX
            and head.session is None
            and head.has_body
            and settings.affinity_max_prefix_bytes > 0
        ):
            return protocol.request_body_wanted(), None, _Pending(pool=pool, head=head, hint=hint)
        response, held = await self._admit(
            pool=pool, head=head, hint=hint, prefix=(), phase="request_headers"
        )
        return response, held, None

    async def _admit(
        self,
        *,
        pool: PickerPool,
        head: protocol.RequestHead,
        hint: tuple[str, ...] | None,
        prefix: tuple[int, ...],
        phase: str,
    ) -> tuple[Any, _Held | None]:
        ask = self._ask(head=head, hint=hint, pool=pool, prefix=prefix)
        loop_time = _loop_time()
        outcome, waited = await pool.acquire(ask=ask)
        if isinstance(outcome, Grant):
            self._metrics.grants.labels(pool.name).inc()
            if waited:
                self._metrics.queue_wait.labels(pool.name, "granted").observe(
                    _loop_time() - loop_time
                )
            self._count_pick(pool=pool, grant=outcome)
            response = protocol.destination(
                address=outcome.address, fallbacks=outcome.fallbacks, phase=phase
            )
            return response, _Held(pool=pool, grant=outcome)
        reason = outcome.reason.name.lower()
        self._metrics.refusals.labels(pool.name, reason, str(outcome.status)).inc()
        if waited:
            self._metrics.queue_wait.labels(pool.name, reason).observe(_loop_time() - loop_time)
        response = protocol.immediate(
            status=outcome.status, reason=reason, retry_after_s=outcome.retry_after_s
        )
        return response, None

    def _count_pick(self, *, pool: PickerPool, grant: Grant) -> None:
        reason = grant.reason.name.lower()
        self._metrics.picks.labels(pool.name, reason).inc()
        if grant.hit_tokens:
            self._metrics.prefix_hit_tokens.labels(pool.name).inc(grant.hit_tokens)
        if grant.reason is PickReason.LOAD_GUARD:
            self._metrics.guard_trips.labels(pool.name).inc()
        logger.debug(
            "Pool %s: request %s to %s (%s, %d tokens expected cached)",
            pool.name,
            grant.id,
            grant.address,
            reason,
            grant.hit_tokens,
        )

    def _ask(
        self,
        *,
        head: protocol.RequestHead,
        hint: tuple[str, ...] | None,
        pool: PickerPool,
        prefix: tuple[int, ...],
    ) -> Ask:
        settings = pool.settings
        if head.prompt_tokens is not None:
            tokens = head.prompt_tokens
        elif head.content_length is not None:
            tokens = settings.estimate_prompt_tokens(content_length=head.content_length)
        else:
            tokens = 0
        subset = None if hint is None else protocol.expand_subset(hint, pool.addresses)
        return Ask(
            id=RequestId(str(next(self._ids))),
            prompt_tokens=tokens,
            priority=head.priority,
            subset=subset,
            prefix=prefix,
            session=head.session if settings.affinity is AffinityMode.PREFIX else None,
        )

    def _check_served(self, *, request: Any, held: _Held) -> None:
        served = protocol.served_endpoint(request.metadata_context, request.response_headers)
        if served in held.pool.addresses and served != held.grant.address:
            # The request holds a slot where it really runs, so the picked pod's slot frees.
            held.pool.moved(id=held.grant.id, address=served)
            self._metrics.served_elsewhere.labels(held.pool.name).inc()
            logger.debug(
                "Pool %s: request %s picked %s, served by %s",
                held.pool.name,
                held.grant.id,
                held.grant.address,
                served,
            )


def _metadata_pool(context: Any) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == protocol.POOL_HEADER:
            return str(value) or None
    return None


def _loop_time() -> float:
    return asyncio.get_running_loop().time()
