"""Start one mode's processes: emulators, Envoy, and (for trimtab) the operator over xDS.

Round-robin and least-request run Envoy with a static cluster of the replicas and Envoy's own
``lb_policy`` (least-request with its defaults: two choices, bias 1). The trimtab mode runs
``trimtab run --local`` on a generated pools file and an Envoy that takes the cluster over ADS,
optionally with a real Prometheus as trimtab's metrics source. The trimtab_picker mode adds
trimtab's endpoint picker (``--picker-port``, the pool's ``admission.mode: picker``) and an
Envoy bootstrapped with it (``envoy-bootstrap --picker``), failing open to the weights.
Everything is started in the caller's :class:`~trimtab_lab.processes.ProcessGroup`, listens on
127.0.0.1 only, and must answer before the stack counts as up; a missing piece raises
``ComponentFailed`` naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import shutil
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from trimtab_lab.emulator.fleet import DEFAULT_MODEL
from trimtab_lab.envoy import EnvoyProcess
from trimtab_lab.processes import ComponentFailed, ProcessGroup

__all__ = ["Mode", "Stack", "StackPlan", "free_ports", "start_stack"]

CLUSTER = "demo"
_POOL = {"namespace": "demo", "name": "demo"}
_CLI = "from trimtab.commands.main import main; main()"
# Static clusters must not shed load: the comparison is about placement, not admission.
_UNLIMITED = 1_000_000
# Envoy's health checks of the picker (wall s): until one passes, requests fail open.
_PICKER_HEALTH_S = 0.5
_HEALTHY = {"eds_health_status": "HEALTHY"}


class Mode(enum.StrEnum):
    """The balancers the demo compares, named as in the simulator's results."""

    ROUND_ROBIN = "round_robin"
    LEAST_REQUEST = "least_request"
    TRIMTAB = "trimtab"
    TRIMTAB_PICKER = "trimtab_picker"


@dataclass(frozen=True, kw_only=True)
class StackPlan:
    """What to start, the same for every mode."""

    speeds: tuple[float, ...]
    """One speed multiplier per replica."""
    profile: str
    time_scale: float
    metrics_interval_s: float
    """trimtab's ``metrics.interval`` in wall seconds."""
    policy: dict[str, Any]
    """``spec.policy`` of the pool (camelCase keys)."""
    prometheus: bool = False
    model: str = DEFAULT_MODEL


@dataclass(frozen=True, kw_only=True)
class Stack:
    replica_urls: tuple[str, ...]
    proxy_url: str
    """The completions URL behind Envoy."""
    pids: dict[str, int]
    """Process id of each component, by name."""
    envoy_admin_url: str = ""
    notes: tuple[str, ...] = ()
    """Anything the user should know (e.g. Prometheus missing, scraping directly)."""


def free_ports(count: int, *, contiguous: bool = False) -> list[int]:
    """Ports free on 127.0.0.1 right now (a race with other programs is possible but rare)."""
    if contiguous:
        for _ in range(50):
            base = free_ports(1)[0]
            if base + count <= 65535 and all(_is_free(base + i) for i in range(count)):
                return list(range(base, base + count))
        raise ComponentFailed(f"no {count} consecutive free ports on 127.0.0.1")
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


async def start_stack(
    *, group: ProcessGroup, plan: StackPlan, mode: Mode, workdir: Path, ready_s: float = 30.0
) -> Stack:
    """Start ``mode``'s processes in ``group`` and wait until requests can flow."""
    _make_dir(workdir)
    ports = free_ports(len(plan.speeds), contiguous=True)
    pids: dict[str, int] = {}
    notes: list[str] = []
    emulators = await group.start(
        name="emulators",
        argv=[
            sys.executable,
            *("-c", _CLI, "emulate"),
            *("--replicas", str(len(plan.speeds)), "--base-port", str(ports[0])),
            *("--profile", plan.profile, "--engine", "vllm", "--model", plan.model),
            *("--speeds", ",".join(f"{s:g}" for s in plan.speeds)),
            *("--time-scale", f"{plan.time_scale:g}"),
        ],
        env={"PYTHONUNBUFFERED": "1"},
    )
    pids["emulators"] = emulators.process.pid
    urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
    for url in urls:
        await group.wait_http(emulators, url=f"{url}/health", timeout_s=ready_s)
    (listener,) = free_ports(1)
    picker = mode is Mode.TRIMTAB_PICKER
    if mode in (Mode.TRIMTAB, Mode.TRIMTAB_PICKER):
        source = await _metrics_source(
            group=group, plan=plan, ports=ports, workdir=workdir, pids=pids, notes=notes
        )
        pool = _pool(plan=plan, ports=ports, source=source, picker=picker)
        bootstrap = await _start_trimtab(
            group=group,
            pool=pool,
            workdir=workdir,
            listener=listener,
            pids=pids,
            ready_s=ready_s,
            picker=picker,
        )
    else:
        bootstrap = _static_bootstrap(mode=mode, ports=ports, listener=listener)
    admin_url = await _start_envoy(
        group=group,
        bootstrap=bootstrap,
        workdir=workdir,
        pids=pids,
        replicas=len(ports),
        ready_s=ready_s,
        picker=picker,
    )
    return Stack(
        replica_urls=urls,
        proxy_url=f"http://127.0.0.1:{listener}/v1/completions",
        pids=pids,
        envoy_admin_url=admin_url,
        notes=tuple(notes),
    )


def _make_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)


def _prometheus_binary() -> str | None:
    found = shutil.which("prometheus")
    if found is None and Path("/usr/bin/prometheus").is_file():
        found = "/usr/bin/prometheus"
    return found


def _pool(
    *, plan: StackPlan, ports: Sequence[int], source: dict[str, Any], picker: bool
) -> dict[str, Any]:
    interval_ms = max(100, round(plan.metrics_interval_s * 1000))
    return {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": dict(_POOL),
        "spec": {
            "endpoints": [
                {"name": f"replica-{i}", "address": "127.0.0.1", "port": port}
                for i, port in enumerate(ports)
            ],
            "engine": "vllm",
            "metrics": {
                **source,
                "interval": f"{interval_ms}ms",
                # Stale after several missed intervals, never sooner than 5 s of wall time.
                "staleAfter": f"{max(5000, 5 * interval_ms)}ms",
            },
            "policy": plan.policy,
            "targets": [{"envoy": {"cluster": CLUSTER}}],
            # The admission defaults otherwise: the KV size comes from the emulators'
            # vllm:cache_config_info, as from a real vLLM.
            "admission": {"mode": "picker" if picker else "off"},
        },
    }


async def _metrics_source(
    *,
    group: ProcessGroup,
    plan: StackPlan,
    ports: Sequence[int],
    workdir: Path,
    pids: dict[str, int],
    notes: list[str],
) -> dict[str, Any]:
    if not plan.prometheus:
        return {"source": "direct"}
    binary = _prometheus_binary()
    if binary is None:
        notes.append("no prometheus binary found: trimtab scrapes the replicas directly")
        return {"source": "direct"}
    (port,) = free_ports(1)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "replicas",
                "scrape_interval": "1s",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{p}"],
                        "labels": {"namespace": _POOL["namespace"], "pod": f"replica-{i}"},
                    }
                    for i, p in enumerate(ports)
                ],
            }
        ],
    }
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    running = await group.start(
        name="prometheus",
        argv=[
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'prometheus-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
    )
    pids["prometheus"] = running.process.pid
    await group.wait_http(running, url=f"http://127.0.0.1:{port}/-/ready", timeout_s=30.0)
    return {"source": "prometheus", "prometheus": {"url": f"http://127.0.0.1:{port}"}}


async def _start_trimtab(
    *,
    group: ProcessGroup,
    pool: dict[str, Any],
    workdir: Path,
    listener: int,
    pids: dict[str, int],
    ready_s: float,
    picker: bool,
) -> dict[str, Any]:
    from trimtab.api.validation import parse_pool
    from trimtab.targets.bootstrap import (
        BootstrapOptions,
        PickerOptions,
        build_bootstrap,
        clusters_from_pools,
    )

    pools_path = workdir / "pools.yaml"
    pools_path.write_text(yaml.safe_dump(pool, sort_keys=False))
    xds, metrics, picker_port = free_ports(3)
    running = await group.start(
        name="trimtab",
        argv=[
            sys.executable,
            *("-c", _CLI, "run", "--local", str(pools_path)),
            *("--xds-port", str(xds), "--metrics-port", str(metrics)),
            *("--status-file", str(workdir / "status.json")),
            *(("--picker-port", str(picker_port)) if picker else ()),
        ],
        env={"PYTHONUNBUFFERED": "1"},
    )
    pids["trimtab"] = running.process.pid
    await group.wait_http(running, url=f"http://127.0.0.1:{metrics}/metrics", timeout_s=ready_s)
    options = BootstrapOptions(
        clusters=clusters_from_pools([parse_pool(pool)]),
        xds_port=xds,
        listener_address="127.0.0.1",
        listener_port=listener,
        # Envoy reports the admin port it bound; the runner reads it.
        admin_port=0,
        node_id="demo",
        picker=(
            PickerOptions(host="127.0.0.1", port=picker_port, health_interval_s=_PICKER_HEALTH_S)
            if picker
            else None
        ),
    )
    return build_bootstrap(options)


def _static_bootstrap(*, mode: Mode, ports: Sequence[int], listener: int) -> dict[str, Any]:
    from trimtab.targets.bootstrap import BootstrapCluster, BootstrapOptions, build_bootstrap

    options = BootstrapOptions(
        clusters=(BootstrapCluster(name=CLUSTER),),
        listener_address="127.0.0.1",
        listener_port=listener,
        admin_port=0,
        eds_dir=".",
    )
    bootstrap = build_bootstrap(options)
    threshold = {
        "max_connections": _UNLIMITED,
        "max_pending_requests": _UNLIMITED,
        "max_requests": _UNLIMITED,
    }
    bootstrap["static_resources"]["clusters"] = [
        {
            "name": CLUSTER,
            "type": "STATIC",
            "connect_timeout": "1s",
            # Envoy's defaults otherwise: least-request samples two hosts, bias 1.
            "lb_policy": "ROUND_ROBIN" if mode is Mode.ROUND_ROBIN else "LEAST_REQUEST",
            "circuit_breakers": {"thresholds": [threshold]},
            "load_assignment": {
                "cluster_name": CLUSTER,
                "endpoints": [
                    {
                        "lb_endpoints": [
                            {
                                "endpoint": {
                                    "address": {
                                        "socket_address": {
                                            "address": "127.0.0.1",
                                            "port_value": port,
                                        }
                                    }
                                }
                            }
                            for port in ports
                        ]
                    }
                ],
            },
        }
    ]
    return bootstrap


async def _start_envoy(
    *,
    group: ProcessGroup,
    bootstrap: dict[str, Any],
    workdir: Path,
    pids: dict[str, int],
    replicas: int,
    ready_s: float,
    picker: bool,
) -> str:
    """Start Envoy, wait until it holds every replica (and passes the picker); its admin URL."""
    envoy = EnvoyProcess(bootstrap=bootstrap, workdir=workdir, group=group)
    try:
        await envoy.start(ready_within=ready_s)
        pids["envoy"] = envoy.pid
        await _wait_hosts(envoy=envoy, group=group, replicas=replicas, ready_s=ready_s)
        if picker:
            await _wait_picker(envoy=envoy, group=group, ready_s=ready_s)
        return envoy.admin_url
    finally:
        # Only the admin client: the group stops Envoy when the mode ends.
        await envoy.client.aclose()


async def _wait_hosts(
    *, envoy: EnvoyProcess, group: ProcessGroup, replicas: int, ready_s: float
) -> None:
    """Envoy is up; wait until its cluster holds every replica (over xDS in trimtab mode)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_s
    seen = 0
    while loop.time() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            seen = len(await envoy.host_weights(CLUSTER))
        if seen >= replicas:
            return
        await asyncio.sleep(0.1)
    tails = "\n".join(f"--- {r.name}:\n{r.log_tail()[-600:]}" for r in group.running)
    raise ComponentFailed(
        f"envoy: cluster {CLUSTER!r} has {seen} of {replicas} hosts after {ready_s:.0f}s "
        f"(trimtab's xDS did not deliver them?); logs end with:\n{tails}"
    )


async def _wait_picker(*, envoy: EnvoyProcess, group: ProcessGroup, ready_s: float) -> None:
    """Wait until Envoy's health checks pass the picker, else every request fails open."""
    from trimtab.targets.bootstrap import PICKER_CLUSTER

    loop = asyncio.get_running_loop()
    deadline = loop.time() + ready_s
    while loop.time() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            data = (await envoy.client.get(f"{envoy.admin_url}/clusters?format=json")).json()
            for status in data["cluster_statuses"]:
                if status["name"] == PICKER_CLUSTER:
                    hosts = status.get("host_statuses", [])
                    # A host that passed its health check has only eds_health_status HEALTHY.
                    if hosts and all(h["health_status"] == _HEALTHY for h in hosts):
                        return
        await asyncio.sleep(0.1)
    tails = "\n".join(f"--- {r.name}:\n{r.log_tail()[-600:]}" for r in group.running)
    raise ComponentFailed(
        f"envoy: the picker cluster {PICKER_CLUSTER!r} is not healthy after {ready_s:.0f}s "
        f"(trimtab's picker not ready?); logs end with:\n{tails}"
    )
