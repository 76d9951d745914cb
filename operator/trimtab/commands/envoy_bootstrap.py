"""``trimtab envoy-bootstrap``: print an Envoy bootstrap (YAML) for trimtab's pools.

Clusters come from ``--cluster NAME`` (repeatable, default policy and retry settings) or from
``--pools FILE`` (InferencePool manifests; their envoy/envoyFile targets, policy and retry).
``--picker HOST:PORT`` adds the ext_proc call to trimtab's endpoint picker, failing open to the
weights; with ``--pools`` only pools whose ``admission.mode`` is ``picker`` go through it.
``--namespaced-clusters`` names a pool's ``envoy`` clusters ``<namespace>/<cluster>``, as the
operator serves them in a cluster (docs/envoy.md); local mode serves the plain names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

import click
import yaml

from trimtab.api.resource import InferencePool
from trimtab.api.validation import parse_pool
from trimtab.errors import SpecInvalid
from trimtab.targets.bootstrap import (
    BootstrapCluster,
    BootstrapOptions,
    PickerOptions,
    XdsClientTls,
    clusters_from_pools,
    render_bootstrap,
)
from trimtab.targets.factory import xds_cluster_name

__all__ = ["envoy_bootstrap"]


def _pool_clusters(pools: Iterable[InferencePool], *, namespaced: bool) -> list[BootstrapCluster]:
    found: list[BootstrapCluster] = []
    for pool in pools:
        named = [t for t in pool.spec.targets if t.envoy is not None or t.envoy_file is not None]
        for target, cluster in zip(named, clusters_from_pools([pool]), strict=True):
            if target.envoy is not None:
                name = xds_cluster_name(
                    namespace=pool.metadata.namespace, cluster=cluster.name, namespaced=namespaced
                )
                cluster = dataclasses.replace(cluster, name=name)
            found.append(cluster)
    return found


def _split_address(address: str, *, option: str = "--xds-address") -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise click.BadParameter(f"{address!r} is not host:port", param_hint=option)
    return host.strip("[]"), int(port)


@click.command("envoy-bootstrap")
@click.option(
    "--xds-address",
    default="127.0.0.1:18000",
    show_default=True,
    help="host:port of trimtab's xDS server (a Service name works).",
)
@click.option("--listener-address", default="0.0.0.0", show_default=True)
@click.option("--listener-port", type=click.IntRange(0, 65535), default=10000, show_default=True)
@click.option(
    "--admin-port",
    type=click.IntRange(0, 65535),
    default=9901,
    show_default=True,
    help="Envoy admin port, bound on 127.0.0.1 only.",
)
@click.option("--cluster", "clusters", multiple=True, help="Cluster name (repeatable).")
@click.option(
    "--pools",
    "pools_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML file of InferencePool manifests.",
)
@click.option("--node-id", default="envoy", show_default=True)
@click.option("--node-cluster", default="trimtab", show_default=True)
@click.option(
    "--eds-dir",
    default=None,
    help="Use file EDS from this directory (NAME.json per cluster) instead of ADS.",
)
@click.option(
    "--picker",
    "picker_address",
    default=None,
    help="host:port of trimtab's endpoint picker (ext_proc); a headless Service when replicated.",
)
@click.option(
    "--picker-failure-mode",
    type=click.Choice(["FailOpen", "FailClose"]),
    default="FailOpen",
    show_default=True,
    help="With --picker: when the picker does not answer, route by the weights (FailOpen) or "
    "answer 500 (FailClose), as a GIE InferencePool's endpointPickerRef.failureMode says.",
)
@click.option("--xds-tls-cert", help="Envoy's client certificate for xDS mTLS (path Envoy reads).")
@click.option("--xds-tls-key", help="Private key of --xds-tls-cert (path Envoy reads).")
@click.option("--xds-ca", help="CA of trimtab's xDS server certificate (path Envoy reads).")
@click.option(
    "--namespaced-clusters",
    is_flag=True,
    help="With --pools: name envoy targets' clusters <namespace>/<cluster>, as the operator "
    "serves them in a cluster (not in local mode).",
)
def envoy_bootstrap(
    *,
    xds_address: str,
    listener_address: str,
    listener_port: int,
    admin_port: int,
    clusters: tuple[str, ...],
    pools_file: Path | None,
    node_id: str,
    node_cluster: str,
    eds_dir: str | None,
    picker_address: str | None,
    picker_failure_mode: str,
    xds_tls_cert: str | None,
    xds_tls_key: str | None,
    xds_ca: str | None,
    namespaced_clusters: bool,
) -> None:
    """Print an Envoy bootstrap that gets its pools' clusters from trimtab."""
    chosen = [BootstrapCluster(name=name) for name in clusters]
    if pools_file is not None:
        try:
            documents = [d for d in yaml.safe_load_all(pools_file.read_text()) if d]
            pools = [parse_pool(d) for d in documents]
            chosen.extend(_pool_clusters(pools, namespaced=namespaced_clusters))
        except (yaml.YAMLError, SpecInvalid) as exc:
            raise click.ClickException(f"{pools_file}: {exc}") from exc
    if not chosen:
        raise click.UsageError("give at least one --cluster or a --pools file with envoy targets")
    host, port = _split_address(xds_address)
    picker = None
    if picker_address is not None:
        picker_host, picker_port = _split_address(picker_address, option="--picker")
        picker = PickerOptions(
            host=picker_host,
            port=picker_port,
            failure_mode_allow=picker_failure_mode == "FailOpen",
        )
    tls_files = (xds_tls_cert, xds_tls_key, xds_ca)
    if any(tls_files) and not all(tls_files):
        raise click.UsageError("xDS mTLS needs all of --xds-tls-cert, --xds-tls-key, --xds-ca")
    xds_tls = (
        XdsClientTls(cert=xds_tls_cert, key=xds_tls_key, ca=xds_ca)
        if xds_tls_cert and xds_tls_key and xds_ca
        else None
    )
    options = BootstrapOptions(
        clusters=tuple(chosen),
        xds_host=host,
        xds_port=port,
        listener_address=listener_address,
        listener_port=listener_port,
        admin_port=admin_port,
        node_id=node_id,
        node_cluster=node_cluster,
        eds_dir=eds_dir,
        picker=picker,
        xds_tls=xds_tls,
    )
    click.echo(render_bootstrap(options), nl=False)
