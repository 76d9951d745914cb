"""``serve_picker``: the ext_proc picker and its gRPC health services on one port.

Health services as the EPP protocol names them: ``liveness`` is SERVING while the process
answers; ``readiness`` and ``envoy.service.ext_proc.v3.ExternalProcessor`` follow
:meth:`PickerServer.set_ready`. The bootstrap's picker cluster health-checks ``readiness`` with
no panic mode, so Envoy only calls a ready picker and otherwise fails open to the weights. With
several trimtab replicas only the Lease leader should be ready: each picker's admission counts
only its own requests, so one live picker keeps every pod's cap exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

import grpc
import prometheus_client
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client.registry import CollectorRegistry

from trimtab.picker.pools import PickerPools
from trimtab.picker.server import ExternalProcessor
from trimtab.picker.telemetry import PickerMetrics, PoolsCollector

__all__ = ["EXT_PROC_SERVICE", "LIVENESS", "READINESS", "PickerServer", "serve_picker"]

logger = logging.getLogger("trimtab.picker")

LIVENESS = "liveness"
READINESS = "readiness"
EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
_SERVING = health_pb2.HealthCheckResponse.SERVING
_NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class PickerServer:
    """A running picker: its bound port, its pools and its readiness switch."""

    def __init__(
        self,
        *,
        pools: PickerPools,
        health: health.aio.HealthServicer,
        port: int,
        server: grpc.aio.Server,
        grace_s: float,
    ) -> None:
        self.pools = pools
        self.port = port
        self._health = health
        self._server = server
        self._grace_s = grace_s
        self._ready = False
        self._stopping: asyncio.Task[None] | None = None

    async def stop(self) -> None:
        """Turn NOT_SERVING, drop waiting requests, give open streams the grace; idempotent.

        An embedding runtime that cancels every task it did not start (kopf does, when it
        stops) must call this first: grpc.aio serves each call in a task of its own, and a
        server whose call tasks were cancelled under it is left half torn down.
        """
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._stop())
        await asyncio.shield(self._stopping)

    async def _stop(self) -> None:
        self._ready = False
        await self._health.enter_graceful_shutdown()
        # Queued requests fail open at once (their streams end, Envoy uses the weights)
        # instead of waiting out the grace period.
        self.pools.close()
        await self._server.stop(grace=self._grace_s)

    @property
    def ready(self) -> bool:
        return self._ready

    async def set_ready(self, ready: bool) -> None:
        """SERVING or NOT_SERVING on ``readiness`` and the ext_proc service."""
        if ready == self._ready:
            return
        self._ready = ready
        status = _SERVING if ready else _NOT_SERVING
        for service in (READINESS, EXT_PROC_SERVICE):
            await self._health.set(service, status)
        logger.info("Picker readiness: %s", "SERVING" if ready else "NOT_SERVING")


@contextlib.asynccontextmanager
async def serve_picker(
    *,
    host: str,
    port: int,
    pools: PickerPools | None = None,
    ready: bool = False,
    registry: CollectorRegistry = prometheus_client.REGISTRY,
    grace_s: float = 1.0,
) -> AsyncIterator[PickerServer]:
    """Serve the picker on ``host:port`` (0 picks a free port) until the block exits.

    ``ready`` is the initial readiness (False until the caller knows it leads and has pools).
    On exit the health services turn NOT_SERVING, the pools drop their waiting requests (which
    Envoy then sends by the weights) and open streams get ``grace_s`` to finish.
    """
    pools = pools if pools is not None else PickerPools()
    server = grpc.aio.server()
    checks = health.aio.HealthServicer()
    await checks.set(LIVENESS, _SERVING)
    for service in (READINESS, EXT_PROC_SERVICE):
        await checks.set(service, _NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    metrics = PickerMetrics(registry=registry)
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(
        ExternalProcessor(pools=pools, metrics=metrics), server
    )
    collector = PoolsCollector(pools=pools.pools)
    registry.register(collector)
    picker: PickerServer | None = None
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
        await server.start()
        picker = PickerServer(
            pools=pools, health=checks, port=bound, server=server, grace_s=grace_s
        )
        await picker.set_ready(ready)
        logger.info("Picker serving ext_proc on %s:%d", host, bound)
        yield picker
    finally:
        try:
            if picker is not None:
                await picker.stop()
            else:
                await server.stop(grace=0)
        finally:
            # grpc.aio's stop can raise CancelledError from its own serving loop; the series
            # must go anyway, or the next picker of this process cannot register them.
            registry.unregister(collector)
            metrics.unregister()
