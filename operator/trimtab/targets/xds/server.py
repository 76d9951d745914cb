"""The built-in xDS server: Envoy's Aggregated Discovery Service over grpc.aio (SotW).

:class:`XdsServer` owns the gRPC server and one :class:`AdsStream` per connected Envoy. Each
stream has a named reader task (owned and cancelled by the stream's handler) that queues
requests; snapshot changes are queued by a cache listener, so the handler alone writes. The
handlers only stream: all resources are built by the controller into the
:class:`SnapshotCache` before any Envoy asks. Delta xDS is not served (UNIMPLEMENTED).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc

from trimtab import tasks
from trimtab.errors import XdsServerError
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.stream import AdsStream

__all__ = ["ServerState", "XdsServer"]

logger = logging.getLogger("trimtab.xds")

_CHANGED = object()
_CLOSED = object()


class ServerState(enum.Enum):
    NEW = "New"
    STARTING = "Starting"
    SERVING = "Serving"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    FAILED = "Failed"


class XdsServer:
    """ADS server for every Envoy that connects; all get the cache's one snapshot."""

    def __init__(self, *, cache: SnapshotCache, write_timeout: float = 30.0) -> None:
        self._cache = cache
        self._write_timeout = write_timeout
        self._server: grpc.aio.Server | None = None
        self._state = ServerState.NEW
        self._port = 0
        # Nonces stay unique across restarts, so a reconnecting Envoy's old nonce is never
        # mistaken for one this instance sent.
        self._nonce_prefix = secrets.token_hex(4)
        self._inboxes: set[asyncio.Queue[object]] = set()

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
        server = grpc.aio.server()
        ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(_Servicer(self), server)
        try:
            bound: int = server.add_insecure_port(f"{host}:{port}")
            if bound == 0:
                raise RuntimeError("port 0 returned")
            await server.start()
        except RuntimeError as exc:
            self._state = ServerState.FAILED
            raise XdsServerError(f"cannot serve xDS on {host}:{port}: {exc}") from exc
        self._server, self._port, self._state = server, bound, ServerState.SERVING
        logger.info("xDS server listening on %s:%d", host, bound)
        return bound

    async def stop(self, *, grace: float) -> None:
        """Stop accepting streams; open streams are cancelled after ``grace`` seconds."""
        if self._server is None or self._state is not ServerState.SERVING:
            return
        self._state = ServerState.STOPPING
        # Ending open streams ourselves lets their handlers return normally; left to
        # grpc's grace they are cancelled mid-await and grpc logs a traceback per Envoy.
        for inbox in self._inboxes:
            inbox.put_nowait(_CLOSED)
        await self._server.stop(grace)
        self._state = ServerState.STOPPED
        logger.info("xDS server stopped")

    async def serve_stream(self, requests: AsyncIterator[Any], context: Any) -> None:
        async def write(response: Any) -> None:
            await asyncio.wait_for(context.write(response), timeout=self._write_timeout)

        inbox: asyncio.Queue[object] = asyncio.Queue()
        self._inboxes.add(inbox)
        stream = AdsStream(
            ledger=self._cache.acks,
            snapshot=self._cache.current,
            write=write,
            nonce_prefix=self._nonce_prefix,
        )
        unsubscribe = self._cache.subscribe(lambda: inbox.put_nowait(_CHANGED))
        reader = tasks.start(_read(requests, inbox), name=f"xds-read-{id(inbox):x}")
        try:
            while (item := await inbox.get()) is not _CLOSED:
                if item is _CHANGED:
                    await stream.on_change()
                else:
                    await stream.on_request(item)
        except TimeoutError:
            logger.warning("Envoy %s did not read a response in time; closing", stream.node)
        finally:
            self._inboxes.discard(inbox)
            unsubscribe()
            stream.close()
            await tasks.stop(reader)
            logger.info("Envoy %s disconnected", stream.node or "(before its first request)")


async def _read(requests: AsyncIterator[Any], inbox: asyncio.Queue[object]) -> None:
    try:
        async for request in requests:
            inbox.put_nowait(request)
    except (grpc.aio.AioRpcError, grpc.RpcError) as exc:
        logger.debug("ADS stream ended: %s", exc)
    finally:
        inbox.put_nowait(_CLOSED)


class _Servicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):  # type: ignore[misc]
    def __init__(self, server: XdsServer) -> None:
        self._server = server

    async def StreamAggregatedResources(
        self, request_iterator: AsyncIterator[Any], context: Any
    ) -> None:
        await self._server.serve_stream(request_iterator, context)
