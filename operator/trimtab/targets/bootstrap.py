"""A working Envoy bootstrap for trimtab's pools (``trimtab envoy-bootstrap``).

The bootstrap gets clusters from trimtab over ADS (gRPC, HTTP/2), or, with ``eds_dir``, holds
static EDS clusters whose endpoints come from watched files. One listener routes by the
``x-trimtab-pool`` header to a pool's cluster, the first cluster being the default. Routes
have no timeout (LLM streams last minutes) and retry only on ``retryOn`` failures (by default
connect-failure and reset, which Envoy can only retry before response headers), never on
timeouts, bounded per request by ``numRetries`` and overall by the cluster's retry budget.

With ``picker`` the listener calls trimtab's endpoint picker over ext_proc (the Gateway API
Inference Extension's EPP protocol) for every cluster with ``picked``: see :func:`picker_filters`
and :func:`picker_load_balancing`. Those clusters are then static in the bootstrap (endpoints
still from ADS or the EDS file), because their load-balancing policy is the picker's.
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
from trimtab.api.spec import AdmissionMode, AppProtocol, PolicySpec, RetrySpec
from trimtab.targets.xds.resources import build_cluster

__all__ = [
    "PICKER_CLUSTER",
    "POOL_HEADER",
    "XDS_CLUSTER",
    "BootstrapCluster",
    "BootstrapOptions",
    "PickerOptions",
    "XdsClientTls",
    "build_bootstrap",
    "clusters_from_pools",
    "picker_filters",
    "picker_load_balancing",
    "render_bootstrap",
]

POOL_HEADER = "x-trimtab-pool"
XDS_CLUSTER = "trimtab_xds"
PICKER_CLUSTER = "trimtab_picker"
LISTENER = "trimtab_ingress"
_TYPES = "type.googleapis.com/envoy.extensions"
_HTTP_OPTIONS = "upstreams.http.v3.HttpProtocolOptions"
PICKER_BODY_MODE: dict[str, str] = {
    "request_header_mode": "SEND",
    "response_header_mode": "SEND",
    "request_body_mode": "BUFFERED_PARTIAL",
    "response_body_mode": "NONE",
    "request_trailer_mode": "SKIP",
    "response_trailer_mode": "SEND",
}
"""The mode the picker asks for to read a prompt (``trimtab.picker.protocol.BODY_MODE``)."""
_HCM = "filters.network.http_connection_manager.v3.HttpConnectionManager"
_PREVIOUS_HOSTS = "retry.host.previous_hosts.v3.PreviousHostsPredicate"


@dataclass(frozen=True)
class BootstrapCluster:
    """One pool's cluster as the bootstrap needs it (routes; static clusters in file mode)."""

    name: str
    policy: PolicySpec = field(default_factory=PolicySpec)
    retry: RetrySpec = field(default_factory=RetrySpec)
    app_protocol: AppProtocol = AppProtocol.HTTP
    picked: bool = True
    """Route this cluster's requests through the picker, when the bootstrap has one."""
    queue_ttl_s: float = 30.0
    """The pool's longest wait in the picker's queue (ext_proc's message_timeout must exceed it)."""


@dataclass(frozen=True)
class PickerOptions:
    """Where trimtab's endpoint picker listens (a headless Service name when replicated)."""

    host: str
    port: int
    timeout_margin_s: float = 5.0
    """ext_proc's message_timeout is the longest queue TTL plus this."""
    health_interval_s: float = 1.0
    failure_mode_allow: bool = True
    """FailOpen (the default): picker down → the weights route. False: FailClose, a 500."""


@dataclass(frozen=True)
class XdsClientTls:
    """mTLS to trimtab's xDS server: Envoy's certificate and key, and the server's CA (paths).

    Paths as Envoy sees them (e.g. a mounted Secret); Envoy reads the files, not trimtab.
    """

    cert: str
    key: str
    ca: str


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
    picker: PickerOptions | None = None
    """Call trimtab's endpoint picker (ext_proc) for the ``picked`` clusters."""
    xds_tls: XdsClientTls | None = None
    """Connect to the xDS server over mTLS instead of plaintext."""


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
                        picked=spec.admission.mode is AdmissionMode.PICKER,
                        queue_ttl_s=float(spec.admission.queue_ttl),
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
    if options.picker is not None:
        bootstrap["static_resources"]["clusters"].append(_picker_cluster(options.picker))
    if options.eds_dir is None:
        bootstrap["static_resources"]["clusters"].append(_xds_cluster(options))
        bootstrap["static_resources"]["clusters"].extend(
            _picked_cluster(cluster, eds_dir=None) for cluster in _picked(options)
        )
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
            _picked_cluster(cluster, eds_dir=options.eds_dir)
            if cluster in _picked(options)
            else _file_cluster(cluster, options.eds_dir)
            for cluster in options.clusters
        )
    return bootstrap


def _file_cluster(cluster: BootstrapCluster, eds_dir: str | None) -> dict[str, Any]:
    proto = build_cluster(
        name=cluster.name,
        policy=cluster.policy,
        retry=cluster.retry,
        app_protocol=cluster.app_protocol,
        max_in_flight=cluster.policy.max_in_flight_per_pod,
        eds_path=None if eds_dir is None else f"{eds_dir.rstrip('/')}/{cluster.name}.json",
    )
    # Through JSON text: MessageToDict nests OrderedDicts for Any fields, which YAML refuses.
    text = json_format.MessageToJson(proto, preserving_proto_field_name=True)
    converted: dict[str, Any] = json.loads(text)
    return converted


def _xds_cluster(options: BootstrapOptions) -> dict[str, Any]:
    cluster = _plain_xds_cluster(options)
    if options.xds_tls is not None:
        cluster["transport_socket"] = _xds_tls_socket(options.xds_tls, host=options.xds_host)
    return cluster


def _xds_tls_socket(tls: XdsClientTls, *, host: str) -> dict[str, Any]:
    """Envoy's client side of the xDS server's mTLS: present ``cert``, trust only ``ca``."""
    context: dict[str, Any] = {
        "common_tls_context": {
            "alpn_protocols": ["h2"],
            "tls_certificates": [
                {"certificate_chain": {"filename": tls.cert}, "private_key": {"filename": tls.key}}
            ],
            "validation_context": {"trusted_ca": {"filename": tls.ca}},
        }
    }
    if not _is_ip(host):
        context["sni"] = host
    return {
        "name": "envoy.transport_sockets.tls",
        "typed_config": {
            "@type": f"{_TYPES}.transport_sockets.tls.v3.UpstreamTlsContext",
            **context,
        },
    }


def _plain_xds_cluster(options: BootstrapOptions) -> dict[str, Any]:
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
    if options.picker is not None:
        picked = {cluster.name for cluster in _picked(options)}
        for route in routes:
            _route_through_picker(route, picked=route["route"]["cluster"] in picked)
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
            *([] if options.picker is None else picker_filters(options)),
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
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
            # Five draws: with activeRequestBias a dead pod's empty queue wins most draws
            # until outlier detection ejects it.
            "host_selection_retry_max_attempts": 5,
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


# --- the endpoint picker (ext_proc, EPP protocol) -------------------------------------------

_DESTINATION = "x-gateway-destination-endpoint"
_SERVED = "x-gateway-destination-endpoint-served"
_LB_NAMESPACE = "envoy.lb"
_SUBSET_NAMESPACE = "envoy.lb.subset_hint"
_EXT_PROC = "envoy.filters.http.ext_proc"
_EXT_PROC_TYPE = f"{_TYPES}.filters.http.ext_proc.v3"
_POLICIES = f"{_TYPES}.load_balancing_policies"


def picker_filters(options: BootstrapOptions) -> list[dict[str, Any]]:
    """The HTTP filters before the router that make Envoy ask the picker for each request.

    1. ``header_mutation`` drops a client's own destination headers: the pool cluster's
       ``override_host`` would otherwise obey them whenever the picker fails open.
    2. ``ext_proc``: request headers, response headers and response trailers SEND, bodies NONE;
       for a pool with prefix affinity the picker switches a request to the request body
       ``BUFFERED_PARTIAL`` (``allowed_override_modes``: that mode only), so it reads the
       prompt up to Envoy's buffer limit (the listener's 1 MiB per-connection default).
       Trailers SEND keeps the stream open until the response ends (Envoy then half-closes it),
       which is when the picker frees the slot; with trailers SKIP Envoy closes it right after
       the response headers. ``failure_mode_allow``: picker down, slow or not ready → the request
       goes on without a pick, to the weights. ``message_timeout`` exceeds every queue TTL, so a
       queued request gets its grant or its 429 from the picker, not a timeout.
    3. ``header_to_metadata`` moves the served-endpoint response header (added by each picked
       route from ``%UPSTREAM_REMOTE_ADDRESS%``) into ``envoy.lb`` metadata, where the EPP
       protocol has the picker read it, and removes it from the response.
    """
    if options.picker is None:
        raise ValueError("picker_filters needs options.picker")
    ttl = max((cluster.queue_ttl_s for cluster in _picked(options)), default=0.0)
    timeout = _duration_text(ttl + options.picker.timeout_margin_s)
    ext_proc = {
        "@type": f"{_EXT_PROC_TYPE}.ExternalProcessor",
        "grpc_service": {"envoy_grpc": {"cluster_name": PICKER_CLUSTER}},
        "failure_mode_allow": options.picker.failure_mode_allow,
        "message_timeout": timeout,
        "processing_mode": {
            "request_header_mode": "SEND",
            "response_header_mode": "SEND",
            "request_body_mode": "NONE",
            "response_body_mode": "NONE",
            "request_trailer_mode": "SKIP",
            "response_trailer_mode": "SEND",
        },
        # Prefix affinity: the picker asks for a request's body in its headers answer; only
        # that one mode may be asked for, so the response side stays as above.
        "allow_mode_override": True,
        "allowed_override_modes": [dict(PICKER_BODY_MODE)],
        "metadata_options": {
            "forwarding_namespaces": {"untyped": [_LB_NAMESPACE, _SUBSET_NAMESPACE]},
            "receiving_namespaces": {"untyped": [_LB_NAMESPACE]},
        },
    }
    strip = {
        "@type": f"{_TYPES}.filters.http.header_mutation.v3.HeaderMutation",
        "mutations": {"request_mutations": [{"remove": _DESTINATION}, {"remove": _SERVED}]},
    }
    served = {
        "@type": f"{_TYPES}.filters.http.header_to_metadata.v3.Config",
        "response_rules": [
            {
                "header": _SERVED,
                "on_header_present": {
                    "metadata_namespace": _LB_NAMESPACE,
                    "key": _SERVED,
                    "type": "STRING",
                },
                "remove": True,
            }
        ],
    }
    return [
        {"name": "envoy.filters.http.header_mutation", "typed_config": strip},
        {"name": _EXT_PROC, "typed_config": ext_proc},
        {"name": "envoy.filters.http.header_to_metadata", "typed_config": served},
    ]


def picker_load_balancing(fallback: dict[str, Any]) -> dict[str, Any]:
    """A cluster's ``load_balancing_policy``: the picker's endpoint, else the pool's own policy.

    ``override_host`` takes the first usable host of the ``envoy.lb`` metadata or the header
    (``ip:port[,ip:port...]``; retries walk down the list) and otherwise, or when the picker
    failed open, lets ``fallback`` (a ``load_balancing_policy``: weighted least-request, or the
    pool's session hash) choose by trimtab's EDS weights exactly as without a picker.
    """
    override_host = {
        "@type": f"{_POLICIES}.override_host.v3.OverrideHost",
        "override_host_sources": [
            {"metadata": {"key": _LB_NAMESPACE, "path": [{"key": _DESTINATION}]}},
            {"header": _DESTINATION},
        ],
        "fallback_policy": fallback,
    }
    return {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.override_host",
                    "typed_config": override_host,
                }
            }
        ]
    }


def _picked(options: BootstrapOptions) -> list[BootstrapCluster]:
    if options.picker is None:
        return []
    return [cluster for cluster in options.clusters if cluster.picked]


def _picked_cluster(cluster: BootstrapCluster, *, eds_dir: str | None) -> dict[str, Any]:
    converted = _file_cluster(cluster, eds_dir)
    # A pool with session affinity already has its policy in the typed form.
    fallback = converted.pop("load_balancing_policy", None)
    if fallback is None:
        del converted["lb_policy"]
        fallback = _least_request_policy(converted.pop("least_request_lb_config", {}))
    converted["load_balancing_policy"] = picker_load_balancing(fallback)
    return converted


def _least_request_policy(least_request_lb_config: dict[str, Any]) -> dict[str, Any]:
    least_request = {
        "@type": f"{_POLICIES}.least_request.v3.LeastRequest",
        **least_request_lb_config,
    }
    return {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.least_request",
                    "typed_config": least_request,
                }
            }
        ]
    }


def _route_through_picker(route: dict[str, Any], *, picked: bool) -> None:
    if not picked:
        route["typed_per_filter_config"] = {
            _EXT_PROC: {"@type": f"{_EXT_PROC_TYPE}.ExtProcPerRoute", "disabled": True}
        }
        return
    # The pool's name as gRPC metadata: the picker knows the pool even on the default route.
    route["typed_per_filter_config"] = {
        _EXT_PROC: {
            "@type": f"{_EXT_PROC_TYPE}.ExtProcPerRoute",
            "overrides": {
                "grpc_initial_metadata": [{"key": POOL_HEADER, "value": route["route"]["cluster"]}]
            },
        }
    }
    route["response_headers_to_add"] = [
        {
            "header": {"key": _SERVED, "value": "%UPSTREAM_REMOTE_ADDRESS%"},
            "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
        }
    ]


def _picker_cluster(picker: PickerOptions) -> dict[str, Any]:
    interval = _duration_text(picker.health_interval_s)
    return {
        "name": PICKER_CLUSTER,
        # A headless Service resolves to every trimtab replica; only the leader is ready.
        "type": "STATIC" if _is_ip(picker.host) else "STRICT_DNS",
        "connect_timeout": "0.25s",
        "typed_extension_protocol_options": {
            f"envoy.extensions.{_HTTP_OPTIONS}": {
                "@type": f"{_TYPES}.{_HTTP_OPTIONS}",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
        "load_assignment": {
            "cluster_name": PICKER_CLUSTER,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": _socket(picker.host, picker.port)}}]}
            ],
        },
        "health_checks": [
            {
                "timeout": interval,
                "interval": interval,
                "no_traffic_interval": interval,
                "unhealthy_threshold": 1,
                "healthy_threshold": 1,
                "grpc_health_check": {"service_name": "readiness"},
            }
        ],
        # No panic routing: with no ready picker, ext_proc fails open instead of calling a
        # follower (whose counts would break the caps) or a picker that is not ready.
        "common_lb_config": {"healthy_panic_threshold": {"value": 0}},
    }


def _duration_text(seconds: float) -> str:
    return f"{round(seconds * 1000) / 1000:g}s"
