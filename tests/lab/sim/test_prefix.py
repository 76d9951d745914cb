"""Prefix workloads and prefix-aware balancers in the simulator.

Covered: the Mooncake reader carries ``hash_ids`` through windows and repetition (copies get
their own hashes); conversations share a growing hash chain within a session and only the
system prompt across sessions; the shared-prefix mix gives the hot prefix to its share of the
requests. Ring hash keeps a key on one host while the host is under Envoy's bounded load and
spills when it is over, and its weights bend the ring; on a small conversation fleet every
balancer completes every request, ring hash keeps each session on one replica, and routing by
session or prefix gets more cache hits than least-request. Not covered: benchmark figures.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from trimtab_lab.sim.engine import RequestStatus
from trimtab_lab.sim.prefix_balancers import HashRing
from trimtab_lab.sim.running import build_workload, run_scenario
from trimtab_lab.sim.scenario import Scenario, parse_scenario
from trimtab_lab.sim.workloads import TraceFormat, read_trace, repeat_to, slice_window
from trimtab_lab.sim.workloads.prefixed import (
    Conversations,
    SharedPrefix,
    generate_conversations,
    generate_shared_prefix,
)


def test_mooncake_hash_ids_follow_their_requests(traces: Path) -> None:
    trace = read_trace(
        path=traces / "mooncake-conversation.jsonl", trace_format=TraceFormat.MOONCAKE
    )
    assert trace.block_hashes is not None
    assert trace.prefix_block_tokens == 512
    lengths = [len(h) for h in trace.block_hashes]
    assert lengths == [math.ceil(p / 512) for p in trace.prompt_tokens.tolist()]
    window = slice_window(trace, duration_s=600.0, start_s=300.0)
    assert window.block_hashes is not None
    assert [math.ceil(p / 512) for p in window.prompt_tokens.tolist()] == [
        len(h) for h in window.block_hashes
    ]
    short = slice_window(trace, duration_s=60.0)
    doubled = repeat_to(short, duration_s=2 * short.span_s)
    assert doubled.block_hashes is not None and len(doubled) > len(short)
    first, second = doubled.block_hashes[: len(short)], doubled.block_hashes[len(short) :]
    assert first == short.block_hashes
    assert not {b for h in first for b in h} & {b for h in second for b in h}


def conversations(**changes: object) -> Conversations:
    return Conversations(**{"warmup_s": 0.0, **changes})  # type: ignore[arg-type]


def test_a_session_grows_one_hash_chain() -> None:
    spec = conversations(system_tokens=1024, block_tokens=512)
    workload = generate_conversations(
        spec=spec, sessions_per_s=0.5, duration_s=600.0, cv=1.0, seed=4
    )
    assert workload.sessions is not None and workload.block_hashes is not None
    sessions = workload.sessions.tolist()
    assert len(set(sessions)) > 50
    by_session: dict[int, list[int]] = {}
    for request, session in enumerate(sessions):
        by_session.setdefault(session, []).append(request)
    multi = [turns for turns in by_session.values() if len(turns) > 1]
    assert multi
    for turns in multi:
        for earlier, later in itertools.pairwise(turns):
            assert workload.arrival_s[earlier] < workload.arrival_s[later]
            assert workload.prompt_tokens[earlier] < workload.prompt_tokens[later]
            full = workload.prompt_tokens[earlier] // 512
            assert workload.hashes_of(later)[:full] == workload.hashes_of(earlier)[:full]
    # Across sessions only the system prompt's two blocks are shared.
    one, two = (by_session[s][0] for s in list(by_session)[:2])
    assert workload.hashes_of(one)[:2] == workload.hashes_of(two)[:2]
    assert workload.hashes_of(one)[2] != workload.hashes_of(two)[2]


def test_most_requests_share_the_hot_prefix() -> None:
    spec = SharedPrefix(prefix_tokens=4096, share=0.9)
    workload = generate_shared_prefix(spec=spec, rate_per_s=20.0, duration_s=100.0, cv=1.0, seed=2)
    assert workload.block_hashes is not None
    hot = workload.hashes_of(
        next(i for i, h in enumerate(workload.block_hashes) if h[0] == workload.block_hashes[0][0])
    )[:8]
    sharing = [h[:8] == hot for h in workload.block_hashes]
    assert 0.85 < np.mean(sharing) < 0.95
    others = [h for h, shares in zip(workload.block_hashes, sharing, strict=True) if not shares]
    assert len({h[0] for h in others}) == len(others)


def test_ring_hash_keeps_a_key_until_its_host_is_over_the_bound() -> None:
    ring = HashRing(hosts=4, hash_balance_factor=150)
    key = 12345
    home = ring.primary(key=key)
    active = [0, 0, 0, 0]
    placed = []
    for _ in range(3):
        host = ring.pick(key=key, active=active)
        placed.append(host)
        active[host] += 1
    # Slots with A active: ceil(ceil((A + 1) * 1.5) / 4): 1, 1, 2 -> three requests fit at home.
    assert placed == [home] * 3
    spilled = ring.pick(key=key, active=active)
    assert spilled != home
    # The probe order is fixed by the key: the same spill every time.
    assert ring.pick(key=key, active=active) == spilled
    # Without a bound nothing spills.
    unbounded = HashRing(hosts=4)
    assert unbounded.pick(key=key, active=[100, 0, 0, 0]) == unbounded.primary(key=key)


def test_weights_bend_the_ring() -> None:
    ring = HashRing(hosts=3)
    ring.configure(weights=[1000, 1000, 200])
    keys = np.random.default_rng(0).integers(0, 2**63, size=20_000).tolist()
    share = np.bincount([ring.primary(key=k) for k in keys], minlength=3) / len(keys)
    assert share[2] == pytest.approx(200 / 2200, abs=0.03)
    assert ring.size >= 1024


def scenario(**changes: object) -> Scenario:
    data: dict[str, object] = {
        "name": "chat",
        "seed": 2,
        "duration": "240s",
        "drain": "300s",
        "fleet": {"replicas": 4, "prefix_caching": True},
        "workload": {
            "conversations": {"warmup": "60s", "think": {"median": "5s"}},
            "utilization": 0.6,
        },
        "policies": ["least_request", "prefix_scorer", "ring_hash", "trimtab_ring", "ideal_prefix"],
        "trimtab": {"settings": {"max_in_flight_per_pod": 256}},
    }
    data.update(changes)
    return parse_scenario(data)


@pytest.fixture(scope="module")
def chat():
    return run_scenario(scenario=scenario(), base_dir=Path("."))


def test_every_prefix_balancer_completes_every_request(chat) -> None:
    for name, run in chat.runs.items():
        assert (run.record.status == RequestStatus.COMPLETED).all(), name
        assert run.result.prefix_hit_rate is not None, name


def test_ring_hash_keeps_each_session_on_one_replica_under_light_load(chat) -> None:
    workload, record = chat.workload, chat.runs["ring_hash"].record
    hosts: dict[int, set[int]] = {}
    for request, session in enumerate(workload.sessions.tolist()):
        hosts.setdefault(session, set()).add(int(record.host[request]))
    spread = sum(len(h) > 1 for h in hosts.values()) / len(hosts)
    # At 60 % load with a 1.5 bound a session rarely meets an overloaded home.
    assert spread < 0.1


def test_affinity_finds_more_of_the_cache_than_least_request(chat) -> None:
    rates = {name: run.result.prefix_hit_rate for name, run in chat.runs.items()}
    for name in ("prefix_scorer", "ring_hash", "trimtab_ring", "ideal_prefix"):
        assert rates[name] > rates["least_request"], rates


def test_without_prefix_caching_no_hit_rate_is_reported() -> None:
    run = run_scenario(
        scenario=scenario(
            fleet={"replicas": 2}, duration="60s", policies=["least_request", "ring_hash"]
        ),
        base_dir=Path("."),
    )
    assert all(r.result.prefix_hit_rate is None for r in run.runs.values())


def test_a_hot_prefix_spills_from_its_ring_home_when_overloaded() -> None:
    hot = scenario(
        workload={"shared_prefix": {"prefix_tokens": 4096, "share": 1.0}, "utilization": 0.7},
        affinity={"hash_key": "prefix", "key_blocks": 2},
        policies=["ring_hash"],
        duration="60s",
    )
    workload = build_workload(scenario=hot, base_dir=Path("."), seed=hot.seed)
    run = run_scenario(scenario=hot, base_dir=Path("."))
    hosts = run.runs["ring_hash"].record.host
    # Every request has the same key, yet the bound sends the excess elsewhere.
    assert len(workload) > 100
    counts = np.bincount(hosts, minlength=4)
    assert (counts > 0).sum() > 1
    assert counts.max() < len(workload)
