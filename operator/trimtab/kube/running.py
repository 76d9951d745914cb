"""Run the operator in-cluster: kopf plus trimtab's services, until stopped.

:func:`run_operator` is what ``trimtab run`` calls and what tests embed (with a
``connection`` to the API emulator and their own source and target factories). kopf runs
through its embedding API (:func:`kopf.operator`) with a registry of its own, so several
operators can share one process; every task started here is named and stopped here.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import kopf

from trimtab import tasks
from trimtab.balancing.loop import LoopSettings, SourceFactory, TargetFactory
from trimtab.balancing.services import Services, run_services
from trimtab.balancing.sources import Sources, SourceSettings
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.kube.client import KubeApi
from trimtab.kube.configmaps import KubeConfigMapWriter
from trimtab.kube.gatewayapi import KubeGatewayAPIWriter
from trimtab.kube.handlers import Runtime, build_registry
from trimtab.kube.inference_extension import PickerService
from trimtab.kube.leadership import AlwaysLeader, Leadership, LeaseElector
from trimtab.targets.factory import BuiltinTargets, TargetSettings
from trimtab.targets.xds.server import XdsSecurity

__all__ = ["OperatorConfig", "run_operator"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    namespaces: Collection[str] = ()
    """Namespaces to serve; empty with ``clusterwide`` for all."""
    clusterwide: bool = False
    liveness_port: int | None = None
    """Port of ``/healthz`` (kopf's liveness endpoint); ``None``: off."""
    metrics_port: int | None = None
    xds_port: int | None = None
    picker_port: int | None = None
    """Port of the endpoint picker (ext_proc); ``None``: off."""
    bind_address: str = "0.0.0.0"
    """Address every listener binds: xDS, /metrics and the liveness endpoint."""
    xds_security: XdsSecurity = field(default_factory=XdsSecurity)
    leader_election: bool = False
    """Use a Lease so only one replica writes status and events."""
    lease_namespace: str = "default"
    lease_name: str = "trimtab-leader"
    identity: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    scanning: bool = True
    """Let kopf list namespaces and watch CRDs (needs cluster-wide read RBAC); off: serve the
    given namespaces as they are and notice a re-created CRD only on restart."""
    connection: kopf.ConnectionInfo | None = None
    """Fixed credentials (tests); ``None``: in-cluster service account, then kubeconfig."""
    loop: LoopSettings = field(default_factory=LoopSettings)
    source_settings: SourceSettings = field(default_factory=SourceSettings)
    """What pools may read: Prometheus URLs, token sources, Secrets, static endpoints."""
    target_settings: TargetSettings = field(
        default_factory=lambda: TargetSettings(namespaced_clusters=True)
    )
    """What pools may write: envoyFile paths; xDS clusters named ``<namespace>/<cluster>``."""
    gateway_api: bool = False
    """Serve ``gatewayAPI`` targets (needs the chart's Gateway API RBAC); off: they report
    TargetUnavailable."""
    picker_service: PickerService | None = None
    """Serve GIE InferencePools whose endpointPickerRef names this Service (needs
    ``picker_port`` and the chart's inferenceExtension RBAC); ``None``: GIE pools are ignored."""


def default_login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """kopf's own login order: the kubernetes client, then service account, then kubeconfig."""
    info: kopf.ConnectionInfo | None = kopf.login_via_client(**kwargs)
    return info or kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)


def operator_settings(*, scanning: bool = True) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = not scanning
    # Events are posted on purpose (reporting.py), never one per log line.
    settings.posting.loggers = False
    settings.posting.reporting_component = "trimtab"
    settings.persistence.finalizer = "trimtab.io/finalizer"
    # Every replica balances and serves xDS, so kopf's own peering (one active replica) is off;
    # our Lease only decides who writes status and events.
    settings.peering.standalone = True
    settings.networking.request_timeout = 30.0
    return settings


async def run_operator(
    *,
    config: OperatorConfig,
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
    sources: SourceFactory | None = None,
    targets: TargetFactory | None = None,
) -> None:
    """Serve InferencePools until ``stop`` is set (or the task is cancelled)."""
    stop = stop or asyncio.Event()
    runtime_box: list[Runtime] = []
    async with run_services(
        xds_port=config.xds_port,
        metrics_port=config.metrics_port,
        host=config.bind_address,
        xds_security=config.xds_security,
        picker_port=config.picker_port,
        namespaced_clusters=config.target_settings.namespaced_clusters,
        # Only the Lease holder admits: one picker counts every pod's requests.
        leading=lambda: bool(runtime_box) and runtime_box[0].leadership.is_leader,
    ) as svc:
        api = KubeApi(connect=lambda: runtime_box[0].current_connection())
        leadership: Leadership = AlwaysLeader()
        if config.leader_election:
            leadership = LeaseElector(
                api=api,
                namespace=config.lease_namespace,
                name=config.lease_name,
                identity=config.identity,
                logger=logger,
            )
        fixed = config.connection
        runtime = Runtime(
            api=api,
            leadership=leadership,
            sources=sources or Sources(api=api, settings=config.source_settings),
            targets=targets
            or BuiltinTargets(
                cache=svc.cache,
                config_maps=KubeConfigMapWriter(api=api),
                settings=config.target_settings,
                gateway_api=KubeGatewayAPIWriter(api=api) if config.gateway_api else None,
            ),
            gate=svc.gate,
            spam=SpamFilter(clock=asyncio.get_running_loop().time),
            settings=config.loop,
            login=(lambda **_: fixed) if fixed is not None else default_login,
            admission=svc.admission,
        )
        runtime_box.append(runtime)
        registry = build_registry(runtime=runtime, picker_service=config.picker_service)
        _register_probe(registry=registry, services=svc)
        elector: asyncio.Task[None] | None = None
        if isinstance(leadership, LeaseElector):
            elector = tasks.start(
                _elect(runtime=runtime, elector=leadership), name="leader election"
            )
        # Started before kopf, so kopf's shutdown sweep leaves it alone: when the stop flag
        # rises it stops the picker while kopf still waits for its own tasks, before kopf
        # cancels every task it did not start (grpc.aio's call tasks among them, which would
        # leave the picker's server half torn down).
        guard = tasks.start(_stop_picker_on(stop, svc), name="picker stop on operator stop")
        try:
            await kopf.operator(
                registry=registry,
                settings=operator_settings(scanning=config.scanning),
                clusterwide=config.clusterwide,
                namespaces=list(config.namespaces),
                liveness_endpoint=(
                    f"http://{_url_host(config.bind_address)}:{config.liveness_port}/healthz"
                    if config.liveness_port is not None
                    else None
                ),
                stop_flag=stop,
                ready_flag=ready,
            )
        finally:
            await tasks.stop(elector, guard)
            await api.aclose()


async def _stop_picker_on(stop: asyncio.Event, services: Services) -> None:
    if services.picker is None:
        return
    await stop.wait()
    await services.picker.stop()


def _register_probe(*, registry: kopf.OperatorRegistry, services: Services) -> None:
    @kopf.on.probe(id="xds", registry=registry)
    def xds_probe(**_: Any) -> str:
        # kopf reports a raising probe as unhealthy on /healthz.
        if not services.healthy():
            raise RuntimeError("the xDS server is not serving")
        return "serving" if services.xds is not None else "disabled"


async def _elect(*, runtime: Runtime, elector: LeaseElector) -> None:
    await runtime.connected.wait()
    await elector.run()


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
