"""Process-wide services shared by the operator and local mode: xDS, picker, /metrics, gate.

:func:`run_services` starts what the flags ask for and stops it in reverse order; it owns the
task that opens the xDS ready gate when no pool tick does (e.g. no pools at all), and keeps
the picker's readiness equal to ``leading()``: of several trimtab replicas only the Lease
holder reports ready, so Envoy's health checks send every request to one picker and the caps
stay exact in total (docs/picker.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from trimtab import tasks
from trimtab.balancing.admitting import AdmissionFeed, PickerFeed
from trimtab.balancing.telemetry import serve_metrics
from trimtab.picker.serving import PickerServer, serve_picker
from trimtab.targets.gate import XdsGate
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import ServerState, XdsSecurity, XdsServer

__all__ = ["Services", "run_services"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Services:
    cache: SnapshotCache
    gate: XdsGate
    xds: XdsServer | None
    xds_port: int | None
    metrics_port: int | None
    picker: PickerServer | None = None
    admission: AdmissionFeed | None = None
    """Where pool loops send decisions for per-request admission; None without a picker."""

    def healthy(self) -> bool:
        """False when the xDS server we started has died (for the liveness probe)."""
        return self.xds is None or self.xds.state is ServerState.SERVING


@contextlib.asynccontextmanager
async def run_services(
    *,
    xds_port: int | None,
    metrics_port: int | None,
    host: str = "0.0.0.0",
    xds_security: XdsSecurity | None = None,
    picker_port: int | None = None,
    leading: Callable[[], bool] = lambda: True,
    namespaced_clusters: bool = False,
) -> AsyncIterator[Services]:
    cache = SnapshotCache(served=xds_port is not None)
    gate = XdsGate(cache=cache)
    async with contextlib.AsyncExitStack() as stack:
        xds: XdsServer | None = None
        bound_xds: int | None = None
        if xds_port is not None:
            xds = XdsServer(cache=cache, security=xds_security or XdsSecurity())
            bound_xds = await xds.start(host=host, port=xds_port)
            stack.push_async_callback(xds.stop, grace=1.0)
        bound_metrics: int | None = None
        if metrics_port is not None:
            bound_metrics = await stack.enter_async_context(
                serve_metrics(host=host, port=metrics_port)
            )
            logger.info("Serving /metrics on %s:%d", host, bound_metrics)
        picker: PickerServer | None = None
        if picker_port is not None:
            picker = await stack.enter_async_context(
                serve_picker(host=host, port=picker_port, ready=False)
            )
        ticker = tasks.start(_tick(gate, picker, leading), name="xDS gate and picker readiness")
        stack.push_async_callback(tasks.stop, ticker)
        yield Services(
            cache=cache,
            gate=gate,
            xds=xds,
            xds_port=bound_xds,
            metrics_port=bound_metrics,
            picker=picker,
            admission=None
            if picker is None
            else PickerFeed(pools=picker.pools, namespaced_clusters=namespaced_clusters),
        )


async def _tick(gate: XdsGate, picker: PickerServer | None, leading: Callable[[], bool]) -> None:
    while True:
        gate.check()
        if picker is not None:
            await picker.set_ready(leading())
        await asyncio.sleep(0.5)
