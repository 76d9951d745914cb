"""The replica model's prefix cache: hits, LRU eviction, KV accounting, preemption.

A tiny profile (blocks of 4 tokens) with hash blocks of 8 tokens (2 KV blocks each) makes
sharing, eviction and preemption reachable in a handful of requests. Hypothesis drives random
plans whose prompts share prefixes from a small set of chains and checks that the cache never
loses a token, never evicts a block a running request uses, and that bulk advancing still
matches stepping one iteration at a time.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab_lab.replica import EventKind, Replica, ReplicaProfile, RequestEvent

from .profiles import TINY

HASH_BLOCK = 8


def chain(tag: int, blocks: int) -> tuple[int, ...]:
    """Hashes of a prompt whose first ``blocks`` hash blocks are conversation ``tag``'s."""
    return tuple(tag * 1000 + index for index in range(blocks))


def cached_replica(profile: ReplicaProfile = TINY) -> Replica:
    return Replica(profile=profile, prefix_block_tokens=HASH_BLOCK)


def run_alone(replica: Replica, *, request_id: int, prompt: int, hashes: tuple[int, ...]) -> float:
    """Serve one request on an otherwise idle replica; its time to first token."""
    start = replica.now
    replica.submit(
        request_id=request_id,
        prompt_tokens=prompt,
        output_tokens=3,
        at_s=start,
        block_hashes=hashes,
    )
    # A finite horizon: an idle replica moves its clock there, and the next request starts.
    events = replica.advance(until_s=start + 100.0)
    (first,) = [e.time_s for e in events if e.kind is EventKind.FIRST_TOKEN]
    return first - start


def test_a_repeated_prompt_skips_the_cached_prefill():
    replica = cached_replica()
    cold = run_alone(replica, request_id=0, prompt=44, hashes=chain(1, 5))
    warm = run_alone(replica, request_id=1, prompt=44, hashes=chain(1, 5))
    state = replica.state()
    assert state.prefix_queries_total == 88
    # Five full hash blocks (40 tokens) were cached by the first request; 4 tokens remain.
    assert state.prefix_hits_total == 40
    assert warm < cold


def test_a_fully_cached_prompt_still_computes_its_last_token():
    replica = cached_replica()
    run_alone(replica, request_id=0, prompt=40, hashes=chain(1, 5))
    run_alone(replica, request_id=1, prompt=40, hashes=chain(1, 5))
    # 40 tokens are exactly five blocks; the last one is recomputed, as vLLM does.
    assert replica.state().prefix_hits_total == 32


def test_hits_need_the_whole_chain_from_the_first_block():
    replica = cached_replica()
    run_alone(replica, request_id=0, prompt=40, hashes=chain(1, 5))
    run_alone(replica, request_id=1, prompt=40, hashes=(99, *chain(1, 5)[1:]))
    assert replica.state().prefix_hits_total == 0


def test_without_prefix_caching_nothing_is_cached_or_counted():
    replica = Replica(profile=TINY)
    first = run_alone(replica, request_id=0, prompt=44, hashes=chain(1, 5))
    second = run_alone(replica, request_id=1, prompt=44, hashes=chain(1, 5))
    state = replica.state()
    assert (state.prefix_queries_total, state.prefix_hits_total, state.kv_blocks_cached) == (
        0,
        0,
        0,
    )
    assert first == pytest.approx(second)


def test_finished_requests_leave_their_blocks_cached_but_free():
    replica = cached_replica()
    run_alone(replica, request_id=0, prompt=44, hashes=chain(1, 5))
    state = replica.state()
    assert state.kv_blocks_used == 0
    assert state.kv_usage == 0.0
    # Five hash blocks of two KV blocks each; the partial block and the output are freed.
    assert state.kv_blocks_cached == 10


def test_running_requests_share_a_cached_prefix_once():
    replica = cached_replica()
    run_alone(replica, request_id=0, prompt=40, hashes=chain(1, 5))
    for request_id in (1, 2):
        replica.submit(
            request_id=request_id,
            prompt_tokens=40,
            output_tokens=50,
            at_s=replica.now,
            block_hashes=chain(1, 5),
        )
    while replica.emitted(1) == 0 or replica.emitted(2) == 0:
        replica.step()
    # Both hold the prompt's 40 tokens: five hash blocks (the last recomputed by each, then
    # shared), 10 KV blocks counted once.
    assert (replica.state().kv_blocks_used, replica.state().kv_blocks_cached) == (10, 0)
    replica.step()
    # The next token is each request's own: one private block each.
    assert replica.state().kv_blocks_used == 10 + 2


def test_eviction_takes_the_least_recently_used_prefix_first():
    small = ReplicaProfile(**{**vars(TINY), "name": "small", "num_gpu_blocks": 26})
    replica = cached_replica(small)
    # Three conversations of 4 full hash blocks (8 KV blocks each) fill the cache to 24.
    for tag in (1, 2, 3):
        run_alone(replica, request_id=tag, prompt=33, hashes=chain(tag, 4))
    assert replica.state().kv_blocks_cached == 24
    # Conversations 1 and 3 are used again, so conversation 2 is the least recently used.
    run_alone(replica, request_id=11, prompt=33, hashes=chain(1, 4))
    run_alone(replica, request_id=13, prompt=33, hashes=chain(3, 4))
    # A prompt of 14 unhashed tokens (16 with its output) needs 4 KV blocks, 2 are free: one of
    # conversation 2 goes, its tail (a chain's head is evicted last).
    run_alone(replica, request_id=4, prompt=14, hashes=())
    hits = replica.state().prefix_hits_total
    run_alone(replica, request_id=21, prompt=33, hashes=chain(2, 4))
    assert replica.state().prefix_hits_total - hits == 3 * HASH_BLOCK
    run_alone(replica, request_id=12, prompt=33, hashes=chain(1, 4))
    assert replica.state().prefix_hits_total - hits == 3 * HASH_BLOCK + 4 * HASH_BLOCK


def test_blocks_in_use_are_never_evicted():
    small = ReplicaProfile(**{**vars(TINY), "name": "small", "num_gpu_blocks": 40})
    replica = cached_replica(small)
    replica.submit(
        request_id=0, prompt_tokens=33, output_tokens=60, at_s=0.0, block_hashes=chain(1, 4)
    )
    replica.step()
    # Request 0 keeps decoding while five other conversations churn through the rest.
    for request_id in range(1, 6):
        replica.submit(
            request_id=request_id,
            prompt_tokens=33,
            output_tokens=2,
            at_s=replica.now,
            block_hashes=chain(10 + request_id, 4),
        )
        replica.advance(until_s=replica.now + 0.05)
    assert replica.emitted(0) < 60
    assert replica.state().kv_blocks_cached < 5 * 8
    before = replica.state().prefix_hits_total
    replica.submit(
        request_id=9, prompt_tokens=33, output_tokens=2, at_s=replica.now, block_hashes=chain(1, 4)
    )
    replica.advance(until_s=math.inf)
    assert replica.state().prefix_hits_total - before == 4 * HASH_BLOCK


def test_a_preempted_request_finds_its_prompt_still_cached():
    small = ReplicaProfile(**{**vars(TINY), "name": "small", "num_gpu_blocks": 20})
    replica = cached_replica(small)
    for request_id, tag in ((0, 1), (1, 2)):
        replica.submit(
            request_id=request_id,
            prompt_tokens=16,
            output_tokens=30,
            at_s=0.0,
            block_hashes=chain(tag, 2),
        )
    events = replica.advance(until_s=math.inf)
    preempted = [e.request_id for e in events if e.kind is EventKind.PREEMPTED]
    assert preempted and set(preempted) <= {0, 1}
    state = replica.state()
    # The two prompts share nothing, so every hit is a preempted request's own prompt.
    assert state.prefix_hits_total >= 2 * HASH_BLOCK * len(set(preempted))
    assert state.kv_blocks_used == 0
    assert state.kv_blocks_cached == 8


def test_prefix_block_size_must_be_a_multiple_of_the_kv_block():
    with pytest.raises(ValueError, match="multiple"):
        Replica(profile=TINY, prefix_block_tokens=6)


plans = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=0.3),  # gap before the arrival
        st.integers(min_value=0, max_value=3),  # conversation (shared prefix)
        st.integers(min_value=1, max_value=120),  # prompt
        st.integers(min_value=1, max_value=60),  # output
    ),
    min_size=1,
    max_size=25,
)


def submit_plan(replica: Replica, request_id: int, step: tuple[float, int, int, int], now: float):
    _, tag, prompt, output = step
    replica.submit(
        request_id=request_id,
        prompt_tokens=prompt,
        output_tokens=output,
        at_s=now,
        block_hashes=chain(tag, prompt // HASH_BLOCK + 1),
    )


def check_kv(replica: Replica) -> None:
    state = replica.state()
    assert state.kv_blocks_used >= 0
    assert state.kv_blocks_cached >= 0
    assert state.kv_blocks_used + state.kv_blocks_cached <= state.kv_blocks_total
    assert state.prefix_hits_total <= state.prefix_queries_total


def run_bulk(plan: list[tuple[float, int, int, int]]) -> tuple[Replica, list[RequestEvent]]:
    replica = cached_replica()
    events: list[RequestEvent] = []
    now = 0.0
    for request_id, step in enumerate(plan):
        now += step[0]
        events += replica.advance(until_s=now)
        check_kv(replica)
        submit_plan(replica, request_id, step, now)
    events += replica.advance(until_s=math.inf)
    return replica, events


@settings(max_examples=150, deadline=None)
@given(plan=plans)
def test_with_sharing_every_token_is_served_and_kv_returns_to_the_cache(plan):
    replica, events = run_bulk(plan)
    state = replica.state()
    assert state.kv_blocks_used == 0
    assert state.running == state.waiting == 0
    assert state.generated_tokens_total == sum(step[3] for step in plan)
    finishes = sorted(e.request_id for e in events if e.kind is EventKind.FINISHED)
    assert finishes == list(range(len(plan)))
    assert state.kv_blocks_cached <= TINY.num_gpu_blocks


@settings(max_examples=100, deadline=None)
@given(plan=plans)
def test_with_sharing_bulk_advance_matches_one_iteration_at_a_time(plan):
    _, bulk = run_bulk(plan)
    stepped_replica = cached_replica()
    stepped: list[RequestEvent] = []
    now = 0.0
    for request_id, step in enumerate(plan):
        now += step[0]
        while not stepped_replica.is_idle() and stepped_replica.now <= now:
            report = stepped_replica.step()
            assert report is not None
            check_kv(stepped_replica)
            stepped += report.events
        submit_plan(stepped_replica, request_id, step, now)
    while (report := stepped_replica.step()) is not None:
        check_kv(stepped_replica)
        stepped += report.events
    assert [(e.kind, e.request_id) for e in bulk] == [(e.kind, e.request_id) for e in stepped]
    for a, b in zip(bulk, stepped, strict=True):
        assert a.time_s == pytest.approx(b.time_s, rel=1e-9, abs=1e-9)
