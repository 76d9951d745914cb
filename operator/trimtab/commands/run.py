"""``trimtab run``: the operator in a cluster, or the same loop locally with ``--local``.

Signals only set a stop flag; the operator then stops its loops, kopf and the servers in
order. kopf is imported only for the cluster mode, so ``--local`` runs where it is absent.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from trimtab.balancing.sources import PrometheusUrlRule, SourceSettings, TokenSource
from trimtab.errors import SpecInvalid
from trimtab.metrics.direct import DEFAULT_MAX_BODY_BYTES
from trimtab.targets.factory import TargetSettings
from trimtab.targets.xds.server import ServerTls, XdsSecurity

__all__ = ["run"]

_Main = Callable[[asyncio.Event], Awaitable[None]]


@click.command("run")
@click.option("--namespace", "-n", "namespaces", multiple=True, help="Namespace to serve.")
@click.option("--all-namespaces", "-A", is_flag=True, help="Serve every namespace.")
@click.option("--liveness-port", type=int, help="Serve /healthz on this port.")
@click.option("--metrics-port", type=int, help="Serve trimtab's /metrics on this port.")
@click.option("--xds-port", type=int, help="Serve Envoy xDS (ADS) on this port.")
@click.option(
    "--picker-port",
    type=int,
    help="Serve the endpoint picker (Envoy ext_proc, GIE EPP protocol) on this port.",
)
@click.option(
    "--bind-address",
    help="Address of the xDS and metrics listeners [default: 0.0.0.0; 127.0.0.1 with --local].",
)
@click.option(
    "--xds-tls-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="xDS server certificate (PEM); with --xds-tls-key and --xds-client-ca: mTLS.",
)
@click.option(
    "--xds-tls-key",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Private key (PEM) of --xds-tls-cert.",
)
@click.option(
    "--xds-client-ca",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="CA (PEM) that every xDS client certificate must be signed by.",
)
@click.option(
    "--xds-node-id-pattern",
    help="Regex an Envoy's node id must fully match; other clients get PERMISSION_DENIED.",
)
@click.option(
    "--log-format", type=click.Choice(["plain", "json"]), default="plain", show_default=True
)
@click.option("--verbose", "-v", is_flag=True, help="Debug logging.")
@click.option(
    "--local",
    "pools_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Run without Kubernetes, balancing the static pools of this YAML file.",
)
@click.option(
    "--status-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --local: write every pool's status to this JSON file.",
)
@click.option(
    "--leader-election/--no-leader-election",
    default=False,
    show_default=True,
    help="Only the Lease holder writes status and events (for several replicas).",
)
@click.option(
    "--lease-namespace",
    default=lambda: os.environ.get("POD_NAMESPACE", "default"),
    help="Namespace of the leader Lease (default: $POD_NAMESPACE or default).",
)
@click.option(
    "--prometheus-url",
    "prometheus_urls",
    multiple=True,
    metavar="[NAMESPACE=]URL",
    help="A Prometheus URL prefix pools may query (of one namespace, or all); repeatable. In a "
    "cluster pools may query no other; locally, without any, pools may query any URL without "
    "a token. A URL without a port allows every port of its host.",
)
@click.option(
    "--prometheus-token",
    "prometheus_tokens",
    multiple=True,
    metavar="[NAMESPACE/]NAME=FILE",
    help="A token source pools choose with tokenSource: NAME (of one namespace, or all); "
    "its token is sent only to a --prometheus-url URL. Repeatable.",
)
@click.option(
    "--allow-secret-tokens",
    is_flag=True,
    help="Let pools read bearerTokenSecretRef from a Secret of their namespace (needs RBAC).",
)
@click.option(
    "--allow-static-endpoints",
    is_flag=True,
    help="Let pools in a cluster list static endpoints (trimtab scrapes them and Envoy routes "
    "to them). Always on with --local.",
)
@click.option(
    "--envoy-file-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="envoyFile.path targets must lie inside this directory [default: refused in a "
    "cluster; the pools file's directory with --local].",
)
@click.option(
    "--max-metrics-bytes",
    type=click.IntRange(min=1024),
    default=DEFAULT_MAX_BODY_BYTES,
    show_default=True,
    help="Largest metrics page read from a pod, or answer from Prometheus; larger: that pod "
    "(or that read) is stale.",
)
@click.option(
    "--gateway-api",
    is_flag=True,
    help="Serve gatewayAPI targets: write HTTPRoute backendRefs and per-tier Services and "
    "EndpointSlices (needs the chart's targets.gatewayAPI.enabled RBAC).",
)
@click.option(
    "--inference-extension",
    is_flag=True,
    help="Be the endpoint picker of GIE InferencePools (inference.networking.k8s.io/v1) whose "
    "endpointPickerRef names --picker-service (needs --picker-port and the chart's "
    "inferenceExtension.enabled RBAC).",
)
@click.option(
    "--picker-service",
    default="trimtab-picker",
    show_default=True,
    metavar="NAME[:PORT]",
    help="With --inference-extension: the Service name (and Service port; default: "
    "--picker-port) that GIE pools reference in their own namespace.",
)
def run(
    *,
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    liveness_port: int | None,
    metrics_port: int | None,
    xds_port: int | None,
    picker_port: int | None,
    bind_address: str | None,
    xds_tls_cert: Path | None,
    xds_tls_key: Path | None,
    xds_client_ca: Path | None,
    xds_node_id_pattern: str | None,
    log_format: str,
    verbose: bool,
    pools_file: Path | None,
    status_file: Path | None,
    leader_election: bool,
    lease_namespace: str,
    prometheus_urls: tuple[str, ...],
    prometheus_tokens: tuple[str, ...],
    allow_secret_tokens: bool,
    allow_static_endpoints: bool,
    envoy_file_dir: Path | None,
    max_metrics_bytes: int,
    gateway_api: bool,
    inference_extension: bool,
    picker_service: str,
) -> None:
    """Balance InferencePools: in a cluster (kopf), or locally with --local."""
    xds_security = _xds_security(
        cert=xds_tls_cert, key=xds_tls_key, client_ca=xds_client_ca, pattern=xds_node_id_pattern
    )
    source_settings = _source_settings(
        urls=prometheus_urls,
        tokens=prometheus_tokens,
        secrets=allow_secret_tokens,
        static_endpoints=allow_static_endpoints or pools_file is not None,
        any_url=pools_file is not None and not prometheus_urls,
        max_bytes=max_metrics_bytes,
    )
    if pools_file is not None:
        if namespaces or all_namespaces or leader_election:
            raise click.UsageError("--local takes no namespaces and no leader election")
        _configure_local_logging(verbose=verbose, json_format=log_format == "json")
        _run_until_signal(
            _local(
                pools_file,
                status_file,
                xds_port,
                metrics_port,
                bind_address or "127.0.0.1",
                xds_security,
                picker_port=picker_port,
                source_settings=source_settings,
                envoy_file_dir=envoy_file_dir,
            )
        )
        return
    if status_file is not None:
        raise click.UsageError("--status-file needs --local (in a cluster, status is on the pool)")
    if bool(namespaces) == all_namespaces:
        raise click.UsageError("give --namespace (one or more) or --all-namespaces")
    gie_service = _picker_service(
        enabled=inference_extension, text=picker_service, picker_port=picker_port
    )
    import kopf

    from trimtab.kube.running import OperatorConfig, run_operator

    kopf.configure(
        verbose=verbose,
        log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.PLAIN,
    )
    _quiet_http_logs()
    config = OperatorConfig(
        namespaces=namespaces,
        clusterwide=all_namespaces,
        liveness_port=liveness_port,
        metrics_port=metrics_port,
        xds_port=xds_port,
        picker_port=picker_port,
        bind_address=bind_address or "0.0.0.0",
        xds_security=xds_security,
        leader_election=leader_election,
        lease_namespace=lease_namespace,
        source_settings=source_settings,
        target_settings=TargetSettings(envoy_file_dir=envoy_file_dir, namespaced_clusters=True),
        gateway_api=gateway_api,
        picker_service=gie_service,
    )

    async def operate(stop: asyncio.Event) -> None:
        await run_operator(config=config, stop=stop)

    _run_until_signal(operate)


def _picker_service(*, enabled: bool, text: str, picker_port: int | None) -> Any:
    if not enabled:
        return None
    if picker_port is None:
        raise click.UsageError("--inference-extension needs --picker-port (GIE pools are picked)")
    from trimtab.kube.inference_extension import PickerService

    try:
        return PickerService.parse(text, default_port=picker_port)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--picker-service") from None


def _xds_security(
    *, cert: Path | None, key: Path | None, client_ca: Path | None, pattern: str | None
) -> XdsSecurity:
    given = [path for path in (cert, key, client_ca) if path is not None]
    if given and len(given) != 3:
        raise click.UsageError("mTLS needs all of --xds-tls-cert, --xds-tls-key, --xds-client-ca")
    if pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise click.BadParameter(str(exc), param_hint="--xds-node-id-pattern") from None
    tls = (
        ServerTls(cert=cert, key=key, client_ca=client_ca)
        if cert is not None and key is not None and client_ca is not None
        else None
    )
    return XdsSecurity(tls=tls, node_id_pattern=pattern)


def _source_settings(
    *,
    urls: tuple[str, ...],
    tokens: tuple[str, ...],
    secrets: bool,
    static_endpoints: bool,
    any_url: bool,
    max_bytes: int,
) -> SourceSettings:
    try:
        rules = tuple(PrometheusUrlRule.parse(text) for text in urls)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--prometheus-url") from None
    try:
        sources = tuple(TokenSource.parse(text) for text in tokens)
        return SourceSettings(
            prometheus_urls=rules,
            any_prometheus_url=any_url,
            token_sources=sources,
            secret_tokens=secrets,
            static_endpoints=static_endpoints,
            max_metrics_bytes=max_bytes,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--prometheus-token") from None


def _quiet_http_logs() -> None:
    # One line per scrape request would drown the decisions in the log.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _configure_local_logging(*, verbose: bool, json_format: bool) -> None:
    fmt = (
        '{"time": "%(asctime)s", "level": "%(levelname)s", "logger": "%(name)s", '
        '"message": %(message)r}'
        if json_format
        else "[%(asctime)s] %(name)-24s [%(levelname)-8s] %(message)s"
    )
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=fmt, force=True)
    _quiet_http_logs()


def _local(
    pools_file: Path,
    status_file: Path | None,
    xds_port: int | None,
    metrics_port: int | None,
    bind_address: str,
    xds_security: XdsSecurity,
    picker_port: int | None = None,
    source_settings: SourceSettings | None = None,
    envoy_file_dir: Path | None = None,
) -> _Main:
    from trimtab.local.runner import run_local

    async def main(stop: asyncio.Event) -> None:
        try:
            await run_local(
                pools_file=pools_file,
                status_file=status_file,
                xds_port=xds_port,
                metrics_port=metrics_port,
                bind_address=bind_address,
                xds_security=xds_security,
                picker_port=picker_port,
                source_settings=source_settings,
                envoy_file_dir=envoy_file_dir,
                stop=stop,
            )
        except SpecInvalid as exc:
            raise click.ClickException("\n".join(exc.problems)) from exc

    return main


def _run_until_signal(main: _Main) -> None:
    async def wrapper() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        logging.getLogger(__name__).debug("Running until SIGINT or SIGTERM")
        await main(stop)

    asyncio.run(wrapper())
