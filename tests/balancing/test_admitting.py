"""The admission feed: a pool's decision reaches the picker under its Envoy cluster's name."""

from __future__ import annotations

from typing import Any

from trimtab.admission import Ask, Grant, RequestId
from trimtab.api.records import (
    Decision,
    Endpoint,
    PodDecision,
    PodName,
    PodSample,
    PodState,
    PoolKey,
)
from trimtab.api.validation import parse_spec
from trimtab.balancing.admitting import PickerFeed
from trimtab.balancing.membership import Member
from trimtab.picker.pools import PickerPools

POOL = PoolKey(namespace="serving", name="llama")
NOW = 100.0


def _spec(mode: str = "picker", cluster: str = "llama", **admission: Any) -> Any:
    return parse_spec(
        {
            "endpoints": [{"name": "a", "address": "10.0.0.1", "port": 8000}],
            "admission": {"mode": mode, **admission},
            "targets": [{"envoy": {"cluster": cluster}}],
        }
    )


def _decision(*pods: tuple[str, int, PodState]) -> Decision:
    return Decision(
        pods=tuple(
            PodDecision(name=PodName(n), weight=1000, max_in_flight=cap, state=s, reason="")
            for n, cap, s in pods
        )
    )


MEMBERS = [
    Member(endpoint=Endpoint(name=PodName("a"), address="10.0.0.1", port=8000)),
    Member(endpoint=Endpoint(name=PodName("b"), address="fd00::2", port=8000)),
]


def _offer(feed: PickerFeed, spec: Any, decision: Decision, **samples: PodSample) -> None:
    feed.offer(
        pool=POOL,
        spec=spec,
        decision=decision,
        members=MEMBERS,
        samples={PodName(k): v for k, v in samples.items()},
        now=NOW,
    )


def test_caps_states_and_addresses_reach_the_picker() -> None:
    pools = PickerPools(clock=lambda: NOW)
    feed = PickerFeed(pools=pools)
    decision = _decision(("a", 2, PodState.SERVING), ("b", 5, PodState.DRAINING))
    _offer(feed, _spec(), decision, a=PodSample(kv_usage=0.5, age_s=1.0))
    pool = pools.get("llama")
    assert pool is not None
    assert pool.addresses == {"10.0.0.1:8000", "[fd00::2]:8000"}
    by_pod = {p.name: p for p in pool.stats().pods}
    assert by_pod[PodName("a")].cap == 2
    assert not by_pod[PodName("b")].accepting


def test_admission_off_or_a_renamed_cluster_removes_the_old_pool() -> None:
    pools = PickerPools(clock=lambda: NOW)
    feed = PickerFeed(pools=pools)
    decision = _decision(("a", 2, PodState.SERVING))
    _offer(feed, _spec(), decision)
    _offer(feed, _spec(cluster="llama-v2"), decision)
    assert pools.get("llama") is None
    assert pools.get("llama-v2") is not None
    _offer(feed, _spec(mode="off", cluster="llama-v2"), decision)
    assert pools.pools() == ()


async def test_the_fed_cap_is_what_the_picker_enforces() -> None:
    pools = PickerPools(clock=lambda: NOW)
    feed = PickerFeed(pools=pools)
    _offer(feed, _spec(queueLength=0), _decision(("a", 1, PodState.SERVING)))
    pool = pools.get("llama")
    assert pool is not None
    first, _ = await pool.acquire(ask=Ask(id=RequestId("1"), prompt_tokens=10))
    second, _ = await pool.acquire(ask=Ask(id=RequestId("2"), prompt_tokens=10))
    assert isinstance(first, Grant) and first.address == "10.0.0.1:8000"
    assert not isinstance(second, Grant)
    assert second.status == 429
