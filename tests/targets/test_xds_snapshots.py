"""The pure snapshot builder: content-hashed versions, validation, and the cluster it builds.

Covered: versions depend only on content; EDS-only changes keep the CDS version; invalid
decisions (weight 0, hostname, missing endpoint, empty) are refused; two pools cannot share a
cluster; the cluster carries LEAST_REQUEST settings, caps, the retry budget, slow start and the
upstream protocol. Not covered here: what Envoy makes of them (tests/envoy).
"""

from __future__ import annotations

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.extensions.upstreams.http.v3 import http_protocol_options_pb2

from trimtab.api.records import Endpoint, PodName, PoolKey
from trimtab.errors import XdsConflict, XdsSnapshotInvalid
from trimtab.targets.xds.snapshots import (
    CLUSTER_TYPE,
    ENDPOINT_TYPE,
    build_pool_resources,
    build_snapshot,
)


def _cluster(resources):
    return cluster_pb2.Cluster.FromString(resources.cluster.payload)


def test_same_content_gives_same_versions(make):
    first = build_snapshot([make.resources({"a": 1, "b": 2})])
    second = build_snapshot([make.resources({"b": 2, "a": 1})])
    assert first.versions == second.versions


def test_weight_change_moves_only_the_eds_version(make):
    before = build_snapshot([make.resources({"a": 1, "b": 2})])
    after = build_snapshot([make.resources({"a": 1, "b": 3})])
    assert before.versions[CLUSTER_TYPE] == after.versions[CLUSTER_TYPE]
    assert before.versions[ENDPOINT_TYPE] != after.versions[ENDPOINT_TYPE]


@pytest.mark.parametrize(
    ("weights", "endpoints", "message"),
    [
        ({"a": 0}, ["a"], "weight 0"),
        ({"a": 1}, [], "no endpoint"),
        ({}, [], "no pods"),
    ],
)
def test_invalid_decisions_are_refused(make, weights, endpoints, message):
    with pytest.raises(XdsSnapshotInvalid, match=message):
        build_pool_resources(
            pool=make.pool,
            cluster="llama",
            spec=make.spec(),
            decision=make.decision(weights),
            endpoints=make.endpoints(endpoints),
        )


def test_hostnames_are_refused_for_eds(make):
    with pytest.raises(XdsSnapshotInvalid, match="IP address"):
        build_pool_resources(
            pool=make.pool,
            cluster="llama",
            spec=make.spec(),
            decision=make.decision({"a": 1}),
            endpoints={PodName("a"): Endpoint(PodName("a"), "vm.example.com", 8000)},
        )


def test_two_pools_cannot_share_a_cluster(make):
    other = make.resources({"a": 1}, pool=PoolKey("other", "llama"))
    with pytest.raises(XdsConflict, match="claimed by pools"):
        build_snapshot([make.resources({"a": 1}), other])


def test_cluster_carries_policy_caps_and_budget(make):
    resources = build_pool_resources(
        pool=make.pool,
        cluster="llama",
        spec=make.spec(
            policy={"activeRequestBias": 0.5, "choiceCount": 3, "maxPendingRequests": 77},
            retry={"budgetPercent": 20, "minConcurrency": 4},
        ),
        decision=make.decision({"a": 1, "b": 1}, caps={"a": 5, "b": 9}),
        endpoints=make.endpoints(["a", "b"]),
    )
    cluster = _cluster(resources)
    assert cluster.lb_policy == cluster_pb2.Cluster.LEAST_REQUEST
    assert cluster.least_request_lb_config.active_request_bias.default_value == 0.5
    assert cluster.least_request_lb_config.choice_count.value == 3
    # Slow start is in the weights the policy ramps; Envoy's own ramp would square it.
    assert not cluster.least_request_lb_config.HasField("slow_start_config")
    # One per-host threshold for every host: the largest cap of the decision.
    assert cluster.circuit_breakers.per_host_thresholds[0].max_connections.value == 9
    thresholds = cluster.circuit_breakers.thresholds[0]
    assert thresholds.max_pending_requests.value == 77
    assert thresholds.retry_budget.budget_percent.value == 20
    assert thresholds.retry_budget.min_retry_concurrency.value == 4


def test_h2c(make):
    cluster = _cluster(make.resources({"a": 1}, appProtocol="h2c"))
    options = http_protocol_options_pb2.HttpProtocolOptions()
    packed = cluster.typed_extension_protocol_options[
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
    ]
    packed.Unpack(options)
    assert options.explicit_http_config.HasField("http2_protocol_options")


def test_resources_wildcard_and_subset(make):
    snapshot = build_snapshot(
        [make.resources({"a": 1}, cluster="x"), make.resources({"a": 1}, cluster="y")]
    )
    assert [r.name for r in snapshot.resources(CLUSTER_TYPE, ())] == ["x", "y"]
    assert [r.name for r in snapshot.resources(ENDPOINT_TYPE, {"y", "gone"})] == ["y"]
