"""The Envoy cluster model: caps, per-host pending queues, overflow, and host picking.

Covered: caps are never exceeded under any sequence of routes, completions and reconfigures;
pending requests stay bound to their host; overflow of ``max_pending_requests`` rejects; P2C
prefers the less loaded host; weighted EDF follows weights with bias 0. Not covered: Envoy's
per-worker split of caps (the simulator models ``--concurrency 1``).
"""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab_lab.sim.envoy import EnvoyCluster, LbAlgorithm, Outcome

operations = st.lists(
    st.one_of(
        st.tuples(st.just("route"), st.integers(0, 0)),
        st.tuples(st.just("complete"), st.integers(0, 3)),
        st.tuples(st.just("caps"), st.integers(1, 4)),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(ops=operations)
def test_caps_and_pending_limit_hold_for_any_sequence(ops):
    cluster = EnvoyCluster(
        hosts=4, algorithm=LbAlgorithm.LEAST_REQUEST, rng=random.Random(1), max_pending_requests=3
    )
    caps = [2, 2, 2, 2]
    cluster.configure(weights=[1, 2, 3, 4], caps=caps)
    host_of: dict[int, int] = {}
    on_host: list[list[int]] = [[] for _ in range(4)]
    next_id = 0
    for op, value in ops:
        if op == "route":
            outcome, host = cluster.route(next_id)
            if outcome is Outcome.SENT:
                on_host[host].append(next_id)
            if outcome is not Outcome.REJECTED:
                host_of[next_id] = host
            next_id += 1
        elif op == "complete" and on_host[value]:
            on_host[value].pop(0)
            released = cluster.complete(value)
            if released is not None:
                assert host_of[released] == value
                on_host[value].append(released)
        elif op == "caps":
            caps = [value] * 4
            for request, host in cluster.configure(weights=[1, 2, 3, 4], caps=caps):
                assert host_of[request] == host
                on_host[host].append(request)
        for host in range(4):
            assert cluster.active[host] == len(on_host[host])
        assert cluster.pending_total <= 3
        assert sum(cluster.pending(h) for h in range(4)) == cluster.pending_total


def test_overflow_of_pending_requests_is_rejected():
    cluster = EnvoyCluster(
        hosts=2, algorithm=LbAlgorithm.LEAST_REQUEST, rng=random.Random(0), max_pending_requests=2
    )
    cluster.configure(weights=[1, 1], caps=[1, 1])
    outcomes = Counter(cluster.route(i)[0] for i in range(6))
    assert outcomes == {Outcome.SENT: 2, Outcome.PENDING: 2, Outcome.REJECTED: 2}
    assert cluster.rejected == 2


def test_two_choices_avoid_the_busier_host():
    cluster = EnvoyCluster(hosts=2, algorithm=LbAlgorithm.LEAST_REQUEST, rng=random.Random(3))
    for request in range(200):
        cluster.route(request)
    assert abs(cluster.active[0] - cluster.active[1]) <= 2


def test_weighted_edf_follows_weights_without_bias():
    cluster = EnvoyCluster(
        hosts=3, algorithm=LbAlgorithm.LEAST_REQUEST, rng=random.Random(5), active_request_bias=0
    )
    cluster.configure(weights=[1, 2, 5], caps=[None, None, None])
    picks = Counter(cluster.route(i)[1] for i in range(800))
    assert picks == {0: 100, 1: 200, 2: 500}


def test_bias_one_flattens_weights_as_hosts_fill():
    cluster = EnvoyCluster(hosts=2, algorithm=LbAlgorithm.LEAST_REQUEST, rng=random.Random(5))
    cluster.configure(weights=[1, 9], caps=[None, None])
    for request in range(400):
        cluster.route(request)
    # With nothing completing, the k-th pick of a host comes k/weight after its previous one,
    # so picks grow as sqrt(weight * time): a 9:1 weight gives ~3:1 traffic, far flatter.
    assert 2.5 <= cluster.active[1] / cluster.active[0] <= 3.5


def test_round_robin_and_full_scan_spread_evenly():
    for algorithm in (LbAlgorithm.ROUND_ROBIN, LbAlgorithm.LEAST_REQUEST_FULL_SCAN):
        cluster = EnvoyCluster(hosts=4, algorithm=algorithm, rng=random.Random(9))
        for request in range(40):
            cluster.route(request)
        assert cluster.active == [10, 10, 10, 10]
