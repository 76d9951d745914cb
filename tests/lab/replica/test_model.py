"""Properties of the replica model: KV bounds, token accounting, preemption, bulk == stepwise.

A tiny profile (64 blocks of 4 tokens, 8 sequences) makes KV exhaustion and preemption common,
so hypothesis reaches them quickly. Not covered here: calibration against real engines (see
``docs/simulator.md``), which no unit test can check.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab_lab.replica import EventKind, Replica, RequestEvent, get_profile

from .profiles import TINY

requests = st.lists(
    st.tuples(
        st.floats(min_value=0.0, max_value=0.5),  # gap before the arrival
        st.integers(min_value=1, max_value=120),  # prompt
        st.integers(min_value=1, max_value=80),  # output
    ),
    min_size=1,
    max_size=25,
)


def run_with_advance(replica: Replica, plan: list[tuple[float, int, int]]) -> list[RequestEvent]:
    events: list[RequestEvent] = []
    now = 0.0
    for request_id, (gap, prompt, output) in enumerate(plan):
        now += gap
        events += replica.advance(until_s=now)
        check_kv(replica)
        replica.submit(request_id=request_id, prompt_tokens=prompt, output_tokens=output, at_s=now)
    events += replica.advance(until_s=math.inf)
    return events


def check_kv(replica: Replica) -> None:
    state = replica.state()
    assert 0 <= state.kv_blocks_used <= state.kv_blocks_total


@settings(max_examples=150, deadline=None)
@given(plan=requests)
def test_every_token_is_accounted_for_and_kv_returns_to_zero(plan):
    replica = Replica(profile=TINY)
    events = run_with_advance(replica, plan)
    state = replica.state()
    assert state.kv_blocks_used == 0
    assert state.running == state.waiting == 0
    assert state.generated_tokens_total == sum(output for _, _, output in plan)
    firsts = [e.request_id for e in events if e.kind is EventKind.FIRST_TOKEN]
    finishes = [e.request_id for e in events if e.kind is EventKind.FINISHED]
    assert sorted(firsts) == sorted(finishes) == list(range(len(plan)))
    assert state.preemptions_total == sum(e.kind is EventKind.PREEMPTED for e in events)


@settings(max_examples=150, deadline=None)
@given(plan=requests)
def test_first_token_precedes_finish_and_times_never_go_back(plan):
    events = run_with_advance(Replica(profile=TINY), plan)
    first = {e.request_id: e.time_s for e in events if e.kind is EventKind.FIRST_TOKEN}
    for event in events:
        if event.kind is EventKind.FINISHED:
            assert first[event.request_id] <= event.time_s
    times = [e.time_s for e in events]
    assert times == sorted(times)


@settings(max_examples=100, deadline=None)
@given(plan=requests)
def test_bulk_advance_matches_one_iteration_at_a_time(plan):
    bulk = run_with_advance(Replica(profile=TINY), plan)
    stepped_replica = Replica(profile=TINY)
    stepped: list[RequestEvent] = []
    now = 0.0
    for request_id, (gap, prompt, output) in enumerate(plan):
        now += gap
        while not stepped_replica.is_idle() and stepped_replica.now <= now:
            report = stepped_replica.step()
            assert report is not None
            stepped += report.events
        stepped_replica.submit(
            request_id=request_id, prompt_tokens=prompt, output_tokens=output, at_s=now
        )
    while (report := stepped_replica.step()) is not None:
        stepped += report.events
    assert [(e.kind, e.request_id) for e in bulk] == [(e.kind, e.request_id) for e in stepped]
    for a, b in zip(bulk, stepped, strict=True):
        assert a.time_s == pytest.approx(b.time_s, rel=1e-9, abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(plan=requests)
def test_preemption_happens_only_when_kv_is_short_and_emitted_counts_match(plan):
    replica = Replica(profile=TINY)
    for request_id, (_, prompt, output) in enumerate(plan):
        replica.submit(request_id=request_id, prompt_tokens=prompt, output_tokens=output, at_s=0)
    counts: dict[int, int] = {}
    # A decode iteration needs at most one block per running request; a prefill chunk at most
    # budget / block_size + 1. Preempting with more free than that would be a bug.
    most_needed = TINY.max_num_seqs + TINY.max_num_batched_tokens // TINY.block_size + 1
    while True:
        before = replica.state()
        report = replica.step()
        if report is None:
            break
        check_kv(replica)
        if any(e.kind is EventKind.PREEMPTED for e in report.events):
            assert before.kv_blocks_total - before.kv_blocks_used < most_needed
        finished = {e.request_id for e in report.events if e.kind is EventKind.FINISHED}
        for request_id in report.emitted:
            counts[request_id] = counts.get(request_id, 0) + 1
            if request_id not in finished:
                assert replica.emitted(request_id) == counts[request_id]
    assert counts == {i: output for i, (_, _, output) in enumerate(plan)}


def test_tight_kv_preempts_and_roomy_kv_does_not():
    plan = [(0.0, 100, 80)] * 8
    tight = Replica(profile=TINY)
    run_with_advance(tight, plan)
    roomy = Replica(profile=get_profile("llama3-8b-h100"))
    run_with_advance(roomy, plan)
    assert tight.state().preemptions_total > 0
    assert roomy.state().preemptions_total == 0


def test_shorter_outputs_finish_first_among_equal_requests():
    replica = Replica(profile=get_profile("llama3-8b-h100"))
    for request_id, output in enumerate([50, 5, 20]):
        replica.submit(request_id=request_id, prompt_tokens=100, output_tokens=output, at_s=0.0)
    events = replica.advance(until_s=math.inf)
    finishes = [e.request_id for e in events if e.kind is EventKind.FINISHED]
    assert finishes == [1, 2, 0]


@pytest.mark.parametrize("name", ["llama3-8b-h100", "llama3-8b-a10g"])
def test_inter_token_latency_rises_with_batch(name):
    profile = get_profile(name)

    def itl(batch: int) -> float:
        replica = Replica(profile=profile)
        for request_id in range(batch):
            replica.submit(request_id=request_id, prompt_tokens=500, output_tokens=200, at_s=0.0)
        replica.advance(until_s=0.0)
        while any(replica.emitted(i) == 0 for i in range(batch)):
            replica.step()
        report = replica.step()
        assert report is not None and len(report.emitted) == batch
        return report.end_s - report.start_s

    assert itl(1) < itl(32) < itl(64)


def test_h100_profile_matches_published_figures():
    profile = get_profile("llama3-8b-h100")
    one = profile.step_time_s(seqs=1, kv_tokens=1000, prefill_tokens=0)
    full = profile.step_time_s(seqs=256, kv_tokens=profile.kv_capacity_tokens, prefill_tokens=0)
    assert 0.005 <= one <= 0.008
    assert 0.012 <= full <= 0.020
    assert profile.kv_capacity_tokens == 25_000 * 16


def test_slower_replica_takes_proportionally_longer():
    def finish(speed: float) -> float:
        replica = Replica(profile=get_profile("llama3-8b-h100"), speed=speed)
        replica.submit(request_id=0, prompt_tokens=300, output_tokens=40, at_s=0.0)
        (event,) = [e for e in replica.advance(until_s=math.inf) if e.kind is EventKind.FINISHED]
        return event.time_s

    assert finish(0.6) == pytest.approx(finish(1.0) / 0.6)


@pytest.mark.parametrize(
    ("prompt", "output", "message"),
    [(0, 5, ">= 1"), (5, 0, ">= 1"), (150, 51, "max_model_len")],
)
def test_impossible_requests_are_refused(prompt, output, message):
    with pytest.raises(ValueError, match=message):
        Replica(profile=TINY).submit(
            request_id=0, prompt_tokens=prompt, output_tokens=output, at_s=0.0
        )


def test_abort_frees_kv_and_forgets_the_request():
    replica = Replica(profile=TINY)
    replica.submit(request_id=7, prompt_tokens=40, output_tokens=50, at_s=0.0)
    replica.step()
    replica.step()
    assert replica.state().kv_blocks_used > 0
    replica.abort(request_id=7)
    assert replica.state().kv_blocks_used == 0
    assert replica.is_idle()
    with pytest.raises(KeyError):
        replica.emitted(7)
