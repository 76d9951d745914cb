"""Envoy v3 protos for one pool: its Cluster and its ClusterLoadAssignment.

Pure functions from the pool's spec and decision to protobuf messages, shared by the xDS server
(via :mod:`trimtab.targets.xds.snapshots`), the file-EDS targets and the bootstrap generator, so
every path to Envoy configures a cluster the same way. The generated protos are untyped, so
``Any`` stays inside this module and the snapshot builder.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from envoy.config.cluster.v3 import circuit_breaker_pb2, cluster_pb2, outlier_detection_pb2
from envoy.config.core.v3 import (
    address_pb2,
    base_pb2,
    config_source_pb2,
    extension_pb2,
    protocol_pb2,
)
from envoy.config.endpoint.v3 import endpoint_components_pb2, endpoint_pb2
from envoy.config.route.v3 import route_components_pb2
from envoy.extensions.load_balancing_policies.common.v3 import common_pb2
from envoy.extensions.load_balancing_policies.maglev.v3 import maglev_pb2
from envoy.extensions.load_balancing_policies.ring_hash.v3 import ring_hash_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2
from envoy.type.v3 import percent_pb2
from google.protobuf import any_pb2, duration_pb2, struct_pb2, wrappers_pb2

from trimtab.api.records import Decision, Endpoint, PodName
from trimtab.api.spec import AffinityMode, AffinitySpec, AppProtocol, PolicySpec, RetrySpec
from trimtab.errors import XdsSnapshotInvalid

__all__ = ["CLUSTER_TYPE", "ENDPOINT_TYPE", "build_cluster", "build_load_assignment"]

CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ENDPOINT_TYPE = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
_HTTP_OPTIONS_KEY = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
# Cluster-wide connection/request limits: the per-host caps are the real limiters; Envoy's
# defaults (1024) would silently cap a large pool, so they are lifted well out of the way.
_CLUSTER_WIDE_LIMIT = 1_000_000
_MAX_WEIGHT_SUM = 2**32 - 1  # Envoy rejects a locality whose weights sum above uint32.
# Never eject more than half the fleet: with everyone ejected Envoy would route to all of
# them anyway (panic), and a fleet-wide fault is the weights' business, not ejection's.
_MAX_EJECTION_PERCENT = 50


def build_cluster(
    *,
    name: str,
    policy: PolicySpec,
    retry: RetrySpec,
    app_protocol: AppProtocol,
    max_in_flight: int,
    eds_path: str | None = None,
) -> Any:
    """An EDS cluster with weighted LEAST_REQUEST, per-host caps, a retry budget and ejection.

    With ``policy.affinity`` on, a consistent hash of the session header replaces
    least-request (see :func:`_consistent_hash`). Envoy has one per-host threshold per
    cluster, so ``max_in_flight`` applies to every host (callers pass the largest cap of the
    decision; smaller caps act through the weights).
    ``eds_path`` switches the endpoint source from ADS to a watched file.
    """
    # No slow_start_config: the policy already ramps a new pod's weight over slowStart (from
    # the pod's Ready time, surviving Envoy restarts); Envoy's own ramp on top would square it.
    return cluster_pb2.Cluster(
        name=name,
        type=cluster_pb2.Cluster.EDS,
        eds_cluster_config=cluster_pb2.Cluster.EdsClusterConfig(eds_config=_eds_source(eds_path)),
        connect_timeout=_duration(1.0),
        **_balancing(policy),
        circuit_breakers=_circuit_breakers(policy=policy, retry=retry, per_host=max_in_flight),
        outlier_detection=_outlier_detection(),
        typed_extension_protocol_options={_HTTP_OPTIONS_KEY: _protocol_options(app_protocol)},
    )


def _balancing(policy: PolicySpec) -> dict[str, Any]:
    if policy.affinity.mode is not AffinityMode.NONE:
        return {"load_balancing_policy": _consistent_hash(policy.affinity)}
    least_request = cluster_pb2.Cluster.LeastRequestLbConfig(
        choice_count=wrappers_pb2.UInt32Value(value=policy.choice_count),
        active_request_bias=base_pb2.RuntimeDouble(
            default_value=policy.active_request_bias, runtime_key="trimtab.active_request_bias"
        ),
    )
    return {
        "lb_policy": cluster_pb2.Cluster.LEAST_REQUEST,
        "least_request_lb_config": least_request,
    }


def _consistent_hash(affinity: AffinitySpec) -> Any:
    """Ring hash or Maglev on the session header, bounded load, in the typed policy form.

    The hash policy sits in the cluster, not the route, so it reaches Envoy over CDS (and in
    the EDS-file bootstrap) and changes without a new listener; Envoy then ignores any route
    hash policy. Both balancers honour the EDS weights: a pod with less weight owns less of
    the ring, so trimtab's weights steer which sessions land where.
    """
    common = common_pb2.ConsistentHashingLbConfig(
        hash_balance_factor=wrappers_pb2.UInt32Value(value=affinity.hash_balance_factor),
        hash_policy=[
            route_components_pb2.RouteAction.HashPolicy(
                header=route_components_pb2.RouteAction.HashPolicy.Header(
                    header_name=affinity.session_header
                )
            )
        ],
    )
    if affinity.mode is AffinityMode.MAGLEV:
        name, config = "maglev", maglev_pb2.Maglev(consistent_hashing_lb_config=common)
    else:
        name, config = (
            "ring_hash",
            ring_hash_pb2.RingHash(
                minimum_ring_size=wrappers_pb2.UInt64Value(value=affinity.minimum_ring_size),
                maximum_ring_size=wrappers_pb2.UInt64Value(value=affinity.maximum_ring_size),
                consistent_hashing_lb_config=common,
            ),
        )
    packed = any_pb2.Any()
    packed.Pack(config)
    return cluster_pb2.LoadBalancingPolicy(
        policies=[
            cluster_pb2.LoadBalancingPolicy.Policy(
                typed_extension_config=extension_pb2.TypedExtensionConfig(
                    name=f"envoy.load_balancing_policies.{name}", typed_config=packed
                )
            )
        ]
    )


def build_load_assignment(
    *, cluster: str, decision: Decision, endpoints: Mapping[PodName, Endpoint]
) -> Any:
    """One locality holding every pod of ``decision`` with its weight, sorted by pod name.

    Raises :class:`XdsSnapshotInvalid` for what Envoy would reject or misread: a weight below
    1, an empty decision, a pod without an endpoint, a hostname instead of an IP address.
    """
    if not decision.pods:
        raise XdsSnapshotInvalid(f"cluster {cluster}: the decision has no pods")
    lb_endpoints = []
    total = 0
    for pod in sorted(decision.pods, key=lambda p: p.name):
        endpoint = endpoints.get(pod.name)
        if endpoint is None:
            raise XdsSnapshotInvalid(f"cluster {cluster}: pod {pod.name} has no endpoint")
        if pod.weight < 1 or pod.max_in_flight < 1:
            raise XdsSnapshotInvalid(
                f"cluster {cluster}: pod {pod.name} has weight {pod.weight} and cap "
                f"{pod.max_in_flight}; Envoy needs both >= 1"
            )
        _require_ip(cluster, endpoint)
        total += pod.weight
        lb_endpoints.append(_lb_endpoint(endpoint, weight=pod.weight, cap=pod.max_in_flight))
    if total > _MAX_WEIGHT_SUM:
        raise XdsSnapshotInvalid(f"cluster {cluster}: weights sum to {total} > {_MAX_WEIGHT_SUM}")
    return endpoint_pb2.ClusterLoadAssignment(
        cluster_name=cluster,
        endpoints=[endpoint_components_pb2.LocalityLbEndpoints(lb_endpoints=lb_endpoints)],
    )


def _lb_endpoint(endpoint: Endpoint, *, weight: int, cap: int) -> Any:
    # The metadata repeats the pod name and its own cap: Envoy ignores it for routing, but it
    # shows in /config_dump what trimtab decided when the cluster-wide cap differs.
    metadata = struct_pb2.Struct()
    metadata.update({"pod": str(endpoint.name), "max_in_flight": cap})
    return endpoint_components_pb2.LbEndpoint(
        endpoint=endpoint_components_pb2.Endpoint(
            address=_socket_address(endpoint.address, endpoint.port), hostname=endpoint.name
        ),
        load_balancing_weight=wrappers_pb2.UInt32Value(value=weight),
        metadata=base_pb2.Metadata(filter_metadata={"trimtab": metadata}),
    )


def _require_ip(cluster: str, endpoint: Endpoint) -> None:
    try:
        ipaddress.ip_address(endpoint.address)
    except ValueError:
        raise XdsSnapshotInvalid(
            f"cluster {cluster}: endpoint {endpoint.name} has address {endpoint.address!r}; "
            "EDS needs an IP address (resolve hostnames before deciding)"
        ) from None


def _socket_address(address: str, port: int) -> Any:
    return address_pb2.Address(
        socket_address=address_pb2.SocketAddress(address=address, port_value=port)
    )


def _eds_source(eds_path: str | None) -> Any:
    if eds_path is None:
        return config_source_pb2.ConfigSource(
            ads=config_source_pb2.AggregatedConfigSource(),
            resource_api_version=config_source_pb2.V3,
        )
    # Envoy only notices a file that is moved into place; watching the directory makes an
    # atomic rename (ours, or the kubelet's ..data symlink swap) trigger a reload.
    directory = eds_path.rsplit("/", 1)[0] or "/"
    return config_source_pb2.ConfigSource(
        path_config_source=config_source_pb2.PathConfigSource(
            path=eds_path, watched_directory=base_pb2.WatchedDirectory(path=directory)
        ),
        resource_api_version=config_source_pb2.V3,
    )


def _circuit_breakers(*, policy: PolicySpec, retry: RetrySpec, per_host: int) -> Any:
    thresholds = circuit_breaker_pb2.CircuitBreakers.Thresholds
    budget = thresholds.RetryBudget(
        budget_percent=_percent(retry.budget_percent),
        min_retry_concurrency=wrappers_pb2.UInt32Value(value=retry.min_concurrency),
    )
    return circuit_breaker_pb2.CircuitBreakers(
        thresholds=[
            thresholds(
                max_connections=wrappers_pb2.UInt32Value(value=_CLUSTER_WIDE_LIMIT),
                max_requests=wrappers_pb2.UInt32Value(value=_CLUSTER_WIDE_LIMIT),
                max_pending_requests=wrappers_pb2.UInt32Value(value=policy.max_pending_requests),
                retry_budget=budget,
                track_remaining=True,
            )
        ],
        per_host_thresholds=[thresholds(max_connections=wrappers_pb2.UInt32Value(value=per_host))],
    )


def _outlier_detection() -> Any:
    """Eject a dead or failing pod within a few requests, for seconds, growing on repeats.

    Between a pod's death and the next decision, the weights still send it traffic; with
    ``activeRequestBias`` its empty queue even attracts it. Connect failures and resets are
    counted apart from upstream 5xx (``split_external_local_origin_errors``), so three refused
    connections eject a dead pod while an answering pod needs five 5xx (or 502/503/504) in a
    row. Success-rate ejection stays off: in a small fleet it would second-guess the weights.
    """
    return outlier_detection_pb2.OutlierDetection(
        split_external_local_origin_errors=True,
        consecutive_local_origin_failure=wrappers_pb2.UInt32Value(value=3),
        enforcing_consecutive_local_origin_failure=wrappers_pb2.UInt32Value(value=100),
        consecutive_5xx=wrappers_pb2.UInt32Value(value=5),
        enforcing_consecutive_5xx=wrappers_pb2.UInt32Value(value=100),
        consecutive_gateway_failure=wrappers_pb2.UInt32Value(value=5),
        enforcing_consecutive_gateway_failure=wrappers_pb2.UInt32Value(value=100),
        enforcing_success_rate=wrappers_pb2.UInt32Value(value=0),
        interval=_duration(1.0),
        base_ejection_time=_duration(5.0),
        max_ejection_time=_duration(60.0),
        max_ejection_percent=wrappers_pb2.UInt32Value(value=_MAX_EJECTION_PERCENT),
    )


def _protocol_options(app_protocol: AppProtocol) -> Any:
    options = http_protocol_options_pb2.HttpProtocolOptions
    if app_protocol is AppProtocol.H2C:
        explicit = options.ExplicitHttpConfig(
            http2_protocol_options=protocol_pb2.Http2ProtocolOptions()
        )
    else:
        explicit = options.ExplicitHttpConfig(
            http_protocol_options=protocol_pb2.Http1ProtocolOptions()
        )
    packed = any_pb2.Any()
    packed.Pack(options(explicit_http_config=explicit))
    return packed


def _percent(value: float) -> Any:
    return percent_pb2.Percent(value=value)


def _duration(seconds: float) -> Any:
    duration = duration_pb2.Duration()
    duration.FromMilliseconds(round(seconds * 1000))
    return duration
