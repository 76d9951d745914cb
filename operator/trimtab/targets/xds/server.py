"""The built-in xDS server: Envoy's Aggregated Discovery Service over grpc.aio (SotW).

:class:`XdsServer` owns the gRPC server and one :class:`AdsStream` per connected Envoy. Each
stream has a named reader task (owned and cancelled by the stream's handler) that hands
requests to the stream's :class:`_Mailbox`; snapshot changes only raise the mailbox's
"changed" flag, so the handler alone writes and always writes the latest snapshot. The
handlers only stream: all resources are built by the controller into the
:class:`SnapshotCache` before any Envoy asks. Delta xDS is not served (UNIMPLEMENTED).

Hostile or broken clients are bounded (:class:`XdsLimits`): at most ``max_streams`` streams
(more are refused with RESOURCE_EXHAUSTED), requests of at most ``max_request_bytes``, at most
``queued_requests`` unread requests per stream (then the reader stops reading, and HTTP/2 flow
control holds the client back), one response in flight per stream, and a stream whose client
does not read a response within ``write_timeout_s`` is closed. Optional mTLS
(:class:`ServerTls`) and a node-id pattern (refused with PERMISSION_DENIED) decide who may
connect at all.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from envoy.service.discovery.v3 import discovery_pb2

from trimtab import tasks
from trimtab.errors import XdsServerError
from trimtab.targets.xds.acks import NODE_TEXT_LIMIT, clean_text
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.stream import AdsStream

__all__ = ["ServerState", "ServerTls", "XdsLimits", "XdsSecurity", "XdsServer"]

logger = logging.getLogger("trimtab.xds")

_CHANGED = object()
_CLOSED = object()
_MIB = 1024 * 1024
_ADS_SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
_ADS_METHOD = "StreamAggregatedResources"


class ServerState(enum.Enum):
    NEW = "New"
    STARTING = "Starting"
    SERVING = "Serving"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    FAILED = "Failed"


@dataclass(frozen=True, kw_only=True)
class ServerTls:
    """mTLS for the xDS port: the server's certificate and key, and the CA of its clients.

    Every client must present a certificate signed by ``client_ca``; the files are PEM and are
    read once, when the server starts.
    """

    cert: Path
    key: Path
    client_ca: Path

    def credentials(self) -> grpc.ServerCredentials:
        try:
            key, cert, ca = (p.read_bytes() for p in (self.key, self.cert, self.client_ca))
        except OSError as exc:
            raise XdsServerError(f"cannot read the xDS TLS files: {exc}") from exc
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=ca, require_client_auth=True
        )


@dataclass(frozen=True, kw_only=True)
class XdsSecurity:
    """Who may connect: mTLS clients of one CA (``tls``) whose node id fully matches a regex."""

    tls: ServerTls | None = None
    node_id_pattern: str | None = None


@dataclass(frozen=True, kw_only=True)
class XdsLimits:
    """Bounds on what clients can make the server hold (see the module docstring)."""

    max_streams: int = 64
    max_request_bytes: int = 256 * 1024
    max_response_bytes: int = 256 * _MIB
    queued_requests: int = 2
    write_timeout_s: float = 30.0


class _Mailbox:
    """One stream's pending work: a few requests, a "snapshot changed" flag, or the end.

    Changes are coalesced into one flag, so a client that does not keep up costs one pending
    response (of the latest snapshot), never a queue of snapshots.
    """

    def __init__(self, *, max_requests: int) -> None:
        self._requests: collections.deque[Any] = collections.deque()
        self._max_requests = max_requests
        self._changed = False
        self._closed = False
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()

    async def put(self, request: Any) -> None:
        while len(self._requests) >= self._max_requests and not self._closed:
            self._room.clear()
            await self._room.wait()
        self._requests.append(request)
        self._wake.set()

    def changed(self) -> None:
        self._changed = True
        self._wake.set()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._room.set()

    async def next(self) -> Any:
        while True:
            if self._closed:
                return _CLOSED
            if self._requests:
                self._room.set()
                return self._requests.popleft()
            if self._changed:
                self._changed = False
                return _CHANGED
            self._wake.clear()
            await self._wake.wait()


class XdsServer:
    """ADS server for every Envoy that connects; all get the cache's one snapshot."""

    def __init__(
        self,
        *,
        cache: SnapshotCache,
        security: XdsSecurity = XdsSecurity(),
        limits: XdsLimits = XdsLimits(),
    ) -> None:
        self._cache = cache
        self._tls = security.tls
        node_id_pattern = security.node_id_pattern
        try:
            self._node_ids = re.compile(node_id_pattern) if node_id_pattern else None
        except re.error as exc:
            raise XdsServerError(f"the node-id pattern {node_id_pattern!r}: {exc}") from exc
        self._limits = limits
        self._server: grpc.aio.Server | None = None
        self._state = ServerState.NEW
        self._port = 0
        # Nonces stay unique across restarts, so a reconnecting Envoy's old nonce is never
        # mistaken for one this instance sent.
        self._nonce_prefix = secrets.token_hex(4)
        self._mailboxes: set[_Mailbox] = set()
        self._handlers: set[asyncio.Task[Any]] = set()

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def port(self) -> int:
        return self._port

    async def start(self, *, host: str, port: int) -> int:
        """Bind ``host:port`` (0 picks a free port) and serve; returns the bound port."""
        if self._state is not ServerState.NEW:
            raise XdsServerError(f"the xDS server cannot start from state {self._state.value}")
        self._state = ServerState.STARTING
        limits = self._limits
        server = grpc.aio.server(
            maximum_concurrent_rpcs=limits.max_streams,
            options=[
                ("grpc.max_receive_message_length", limits.max_request_bytes),
                ("grpc.max_send_message_length", limits.max_response_bytes),
                ("grpc.http2.bdp_probe", 0),
            ],
        )
        server.add_generic_rpc_handlers((self._handler(),))
        address = f"{host}:{port}"
        try:
            credentials = self._tls.credentials() if self._tls is not None else None
            bound: int = (
                server.add_secure_port(address, credentials)
                if credentials is not None
                else server.add_insecure_port(address)
            )
            if bound == 0:
                raise RuntimeError("port 0 returned")
            await server.start()
        except (RuntimeError, XdsServerError) as exc:
            self._state = ServerState.FAILED
            raise XdsServerError(f"cannot serve xDS on {address}: {exc}") from exc
        self._server, self._port, self._state = server, bound, ServerState.SERVING
        logger.info(
            "xDS server listening on %s:%d (%s, at most %d streams)",
            host,
            bound,
            "mTLS" if self._tls is not None else "plaintext",
            limits.max_streams,
        )
        return bound

    async def stop(self, *, grace: float) -> None:
        """Stop accepting streams; open streams are cancelled after ``grace`` seconds."""
        if self._server is None or self._state is not ServerState.SERVING:
            return
        self._state = ServerState.STOPPING
        # Ending open streams ourselves lets their handlers return normally; left to
        # grpc's grace they are cancelled mid-await and grpc logs a traceback per Envoy.
        for mailbox in self._mailboxes:
            mailbox.close()
        await self._server.stop(grace)
        # grpc's stop does not wait for the handlers' tasks to end; they end right after
        # their streams close, so nothing of the server outlives stop().
        if self._handlers:
            await asyncio.wait(set(self._handlers), timeout=grace + 5.0)
        self._state = ServerState.STOPPED
        logger.info("xDS server stopped")

    def _handler(self) -> grpc.GenericRpcHandler:
        # Responses arrive serialized (the stream joins shared, pre-encoded resources), so no
        # response serializer; Delta xDS is not registered, so grpc answers it UNIMPLEMENTED.
        method = grpc.stream_stream_rpc_method_handler(
            self.serve_stream,
            request_deserializer=discovery_pb2.DiscoveryRequest.FromString,
            response_serializer=None,
        )
        return grpc.method_handlers_generic_handler(_ADS_SERVICE, {_ADS_METHOD: method})

    async def serve_stream(self, requests: AsyncIterator[Any], context: Any) -> None:
        async def write(response: bytes) -> None:
            await asyncio.wait_for(context.write(response), timeout=self._limits.write_timeout_s)

        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        mailbox = _Mailbox(max_requests=self._limits.queued_requests)
        self._mailboxes.add(mailbox)
        stream = AdsStream(
            ledger=self._cache.acks,
            snapshot=self._cache.current,
            write=write,
            nonce_prefix=self._nonce_prefix,
        )
        unsubscribe = self._cache.subscribe(mailbox.changed)
        reader = tasks.start(_read(requests, mailbox), name=f"xds-read-{id(mailbox):x}")
        try:
            while (item := await mailbox.next()) is not _CLOSED:
                if item is _CHANGED:
                    await stream.on_change()
                    continue
                if stream.stream_id is None and not self._allowed(item.node.id):
                    await context.abort(
                        grpc.StatusCode.PERMISSION_DENIED, "this node id may not connect"
                    )
                await stream.on_request(item)
        except TimeoutError:
            logger.warning("Envoy %s did not read a response in time; closing", stream.node)
        finally:
            self._mailboxes.discard(mailbox)
            unsubscribe()
            stream.close()
            await tasks.stop(reader)
            logger.info("Envoy %s disconnected", stream.node or "(before its first request)")

    def _allowed(self, node_id: str) -> bool:
        if self._node_ids is None or self._node_ids.fullmatch(node_id):
            return True
        logger.warning(
            "refused an xDS stream from node %r: the id does not match the allowed pattern",
            clean_text(node_id, limit=NODE_TEXT_LIMIT),
        )
        return False


async def _read(requests: AsyncIterator[Any], mailbox: _Mailbox) -> None:
    try:
        async for request in requests:
            await mailbox.put(request)
    except (grpc.aio.AioRpcError, grpc.RpcError) as exc:
        logger.debug("ADS stream ended: %s", exc)
    finally:
        mailbox.close()
