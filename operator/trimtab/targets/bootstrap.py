"""A working Envoy bootstrap for trimtab's pools (``trimtab envoy-bootstrap``).

The bootstrap gets clusters from trimtab over ADS (gRPC, HTTP/2), or, with ``eds_dir``, holds
static EDS clusters whose endpoints come from watched files. One listener routes by the
``x-trimtab-pool`` header to a pool's cluster, the first cluster being the default. Routes
have no timeout (LLM streams last minutes) and retry only on ``retryOn`` failures (by default
connect-failure and reset, which Envoy can only retry before response headers), never on
timeouts, bounded per request by ``numRetries`` and overall by the cluster's retry budget.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import yaml
from google.protobuf import json_format

from trimtab.api.resource import InferencePool
from trimtab.api.spec import AppProtocol, PolicySpec, RetrySpec
from trimtab.targets.xds.resources import build_cluster

__all__ = [
    "POOL_HEADER",
    "XDS_CLUSTER",
    "BootstrapCluster",
    "BootstrapOptions",
    "build_bootstrap",
    "clusters_from_pools",
    "render_bootstrap",
]

POOL_HEADER = "x-trimtab-pool"
XDS_CLUSTER = "trimtab_xds"
LISTENER = "trimtab_ingress"
_TYPES = "type.googleapis.com/envoy.extensions"
_HTTP_OPTIONS = "upstreams.http.v3.HttpProtocolOptions"
_HCM = "filters.network.http_connection_manager.v3.HttpConnectionManager"
_PREVIOUS_HOSTS = "retry.host.previous_hosts.v3.PreviousHostsPredicate"


@dataclass(frozen=True)
class BootstrapCluster:
    """One pool's cluster as the bootstrap needs it (routes; static clusters in file mode)."""

    name: str
    policy: PolicySpec = field(default_factory=PolicySpec)
    retry: RetrySpec = field(default_factory=RetrySpec)
    app_protocol: AppProtocol = AppProtocol.HTTP


@dataclass(frozen=True)
class BootstrapOptions:
    clusters: tuple[BootstrapCluster, ...]
    xds_host: str = "127.0.0.1"
    xds_port: int = 18000
    listener_address: str = "0.0.0.0"
    listener_port: int = 10000
    admin_port: int = 9901
    node_id: str = "envoy"
    node_cluster: str = "trimtab"
    eds_dir: str | None = None
    """File EDS instead of ADS: cluster ``NAME`` reads ``<eds_dir>/NAME.json``."""


def clusters_from_pools(pools: Iterable[InferencePool]) -> tuple[BootstrapCluster, ...]:
    """Every ``envoy`` and ``envoyFile`` target of ``pools``, with its pool's settings."""
    found = []
    for pool in pools:
        spec = pool.spec
        for target in spec.targets:
            named = target.envoy or target.envoy_file
            if named is not None:
                found.append(
                    BootstrapCluster(
                        name=named.cluster,
                        policy=spec.policy,
                        retry=spec.retry,
                        app_protocol=spec.app_protocol,
                    )
                )
    return tuple(found)


def render_bootstrap(options: BootstrapOptions) -> str:
    return yaml.safe_dump(build_bootstrap(options), sort_keys=False)


def build_bootstrap(options: BootstrapOptions) -> dict[str, Any]:
    if not options.clusters:
        raise ValueError("the bootstrap needs at least one cluster")
    bootstrap: dict[str, Any] = {
        "node": {"id": options.node_id, "cluster": options.node_cluster},
        "admin": {"address": _socket("127.0.0.1", options.admin_port)},
        "static_resources": {"listeners": [_listener(options)], "clusters": []},
    }
    if options.eds_dir is None:
        bootstrap["static_resources"]["clusters"].append(_xds_cluster(options))
        bootstrap["dynamic_resources"] = {
            "ads_config": {
                "api_type": "GRPC",
                "transport_api_version": "V3",
                "grpc_services": [{"envoy_grpc": {"cluster_name": XDS_CLUSTER}}],
                "set_node_on_first_message_only": True,
            },
            "cds_config": {"ads": {}, "resource_api_version": "V3"},
        }
    else:
        bootstrap["static_resources"]["clusters"].extend(
            _file_cluster(cluster, options.eds_dir) for cluster in options.clusters
        )
    return bootstrap


def _file_cluster(cluster: BootstrapCluster, eds_dir: str) -> dict[str, Any]:
    proto = build_cluster(
        name=cluster.name,
        policy=cluster.policy,
        retry=cluster.retry,
        app_protocol=cluster.app_protocol,
        max_in_flight=cluster.policy.max_in_flight_per_pod,
        eds_path=f"{eds_dir.rstrip('/')}/{cluster.name}.json",
    )
    # Through JSON text: MessageToDict nests OrderedDicts for Any fields, which YAML refuses.
    text = json_format.MessageToJson(proto, preserving_proto_field_name=True)
    converted: dict[str, Any] = json.loads(text)
    return converted


def _xds_cluster(options: BootstrapOptions) -> dict[str, Any]:
    return {
        "name": XDS_CLUSTER,
        # An IP needs no resolution; a Service name (trimtab.trimtab-system.svc) does.
        "type": "STATIC" if _is_ip(options.xds_host) else "STRICT_DNS",
        "connect_timeout": "1s",
        "typed_extension_protocol_options": {
            f"envoy.extensions.{_HTTP_OPTIONS}": {
                "@type": f"{_TYPES}.{_HTTP_OPTIONS}",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": XDS_CLUSTER,
            "endpoints": [
                {
                    "lb_endpoints": [
                        {"endpoint": {"address": _socket(options.xds_host, options.xds_port)}}
                    ]
                }
            ],
        },
    }


def _listener(options: BootstrapOptions) -> dict[str, Any]:
    routes = [_route(cluster, header=True) for cluster in options.clusters]
    routes.append(_route(options.clusters[0], header=False))
    hcm = {
        "@type": f"{_TYPES}.{_HCM}",
        "stat_prefix": "trimtab",
        "codec_type": "AUTO",
        "route_config": {
            "name": "trimtab",
            # Clusters arrive over CDS after the listener exists; unknown ones answer 503.
            "validate_clusters": False,
            "virtual_hosts": [
                {
                    "name": "trimtab",
                    "domains": ["*"],
                    "routes": routes,
                    # x-envoy-attempt-count tells a replica (and its logs) a request is a retry.
                    "include_request_attempt_count": True,
                }
            ],
        },
        "http_filters": [
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            }
        ],
    }
    return {
        "name": LISTENER,
        "address": _socket(options.listener_address, options.listener_port),
        "filter_chains": [
            {
                "filters": [
                    {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                ]
            }
        ],
    }


def _route(cluster: BootstrapCluster, *, header: bool) -> dict[str, Any]:
    match: dict[str, Any] = {"prefix": "/"}
    if header:
        match["headers"] = [{"name": POOL_HEADER, "string_match": {"exact": cluster.name}}]
    # timeout 0: no upper bound on a response; a long generation is not a failure.
    action: dict[str, Any] = {"cluster": cluster.name, "timeout": "0s"}
    if cluster.retry.num_retries > 0 and cluster.retry.retry_on:
        action["retry_policy"] = {
            "retry_on": ",".join(reason.value for reason in cluster.retry.retry_on),
            "num_retries": cluster.retry.num_retries,
            # Retry on another pod: the one that just failed is the likeliest to fail again.
            "retry_host_predicate": [
                {
                    "name": "envoy.retry_host_predicates.previous_hosts",
                    "typed_config": {"@type": f"{_TYPES}.{_PREVIOUS_HOSTS}"},
                }
            ],
            "host_selection_retry_max_attempts": 3,
        }
    return {"match": match, "route": action}


def _socket(address: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": address, "port_value": port}}


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
