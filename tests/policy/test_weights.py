"""How weights follow load: headroom, monotonicity, hysteresis, smoothing and determinism.

Each test builds a small pool with :func:`pod` and checks one behaviour of the weights.
Skipped here: states (``test_states.py``) and malformed input (``test_robustness.py``).
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trimtab.api.records import Decision, PodDecision, PodInput, PodName, PodState
from trimtab.policy import PolicySettings, compute_decision

from .builders import pod, weights

DEFAULTS = PolicySettings()
QUEUED = PolicySettings(queue_weight=1.0)
loads = st.floats(min_value=0.0, max_value=1.0)
queues = st.floats(min_value=0.0, max_value=50.0)


def test_more_kv_headroom_gets_more_weight() -> None:
    decision = compute_decision(
        pods=[pod("idle", kv=0.7), pod("half", kv=0.8), pod("full", kv=0.95)],
        previous=None,
        settings=DEFAULTS,
        elapsed_s=2.0,
    )
    got = weights(decision)
    assert got["idle"] == DEFAULTS.weight_scale
    assert got["idle"] > got["half"] > got["full"]
    assert got["full"] < 2 * DEFAULTS.min_weight


def test_waiting_requests_cut_weight() -> None:
    got = weights(
        compute_decision(
            pods=[pod("a", waiting=0.0), pod("b", waiting=1.0), pod("c", waiting=4.0)],
            previous=None,
            settings=QUEUED,
            elapsed_s=2.0,
        )
    )
    assert got["a"] > got["b"] > got["c"]


def test_uniform_load_gives_equal_weights() -> None:
    for kv in (0.1, 0.5, 0.97):
        decision = compute_decision(
            pods=[pod(f"p{i}", kv=kv, waiting=2.0) for i in range(4)],
            previous=None,
            settings=DEFAULTS,
            elapsed_s=2.0,
        )
        assert set(weights(decision).values()) == {DEFAULTS.weight_scale}


@settings(max_examples=300, deadline=None)
@given(
    others=st.lists(st.tuples(loads, queues), min_size=0, max_size=5),
    kv=loads,
    waiting=queues,
    kv_drop=loads,
    waiting_drop=queues,
    previous_weight=st.one_of(st.none(), st.integers(min_value=1, max_value=1000)),
    elapsed_s=st.floats(min_value=0.0, max_value=100.0),
)
def test_more_headroom_never_gives_less_weight(
    others: list[tuple[float, float]],
    kv: float,
    waiting: float,
    kv_drop: float,
    waiting_drop: float,
    previous_weight: int | None,
    elapsed_s: float,
) -> None:
    rest = [pod(f"o{i}", kv=k, waiting=w) for i, (k, w) in enumerate(others)]
    previous = None
    if previous_weight is not None:
        base = compute_decision(pods=rest, previous=None, settings=DEFAULTS, elapsed_s=0.0)
        mine = PodDecision(
            name=PodName("me"),
            weight=previous_weight,
            max_in_flight=DEFAULTS.max_in_flight_per_pod,
            state=PodState.SERVING,
            reason="",
        )
        previous = Decision(pods=(mine, *base.pods))

    def my_weight(*, my_kv: float, my_waiting: float) -> int:
        decision = compute_decision(
            pods=[pod("me", kv=my_kv, waiting=my_waiting), *rest],
            previous=previous,
            settings=DEFAULTS,
            elapsed_s=elapsed_s,
        )
        return weights(decision)["me"]

    busier = my_weight(my_kv=kv, my_waiting=waiting)
    freer = my_weight(my_kv=kv * (1.0 - kv_drop), my_waiting=max(0.0, waiting - waiting_drop))
    assert freer >= busier


def test_same_inputs_give_the_same_decision() -> None:
    pods = [pod("a", kv=0.2), pod("b", kv=0.7, waiting=3.0), pod("c", kv=None, ready_for=10.0)]
    first = compute_decision(pods=pods, previous=None, settings=DEFAULTS, elapsed_s=2.0)
    again = compute_decision(pods=pods, previous=None, settings=DEFAULTS, elapsed_s=2.0)
    assert first == again
    following = compute_decision(pods=pods, previous=first, settings=DEFAULTS, elapsed_s=2.0)
    assert weights(following) == weights(first)


def test_tiny_changes_hold_every_weight() -> None:
    before = [pod("a", kv=0.30), pod("b", kv=0.60), pod("c", kv=0.85)]
    after = [pod("a", kv=0.31), pod("b", kv=0.61), pod("c", kv=0.851)]
    first = compute_decision(pods=before, previous=None, settings=DEFAULTS, elapsed_s=2.0)
    held = compute_decision(pods=after, previous=first, settings=DEFAULTS, elapsed_s=2.0)
    assert weights(held) == weights(first)
    assert [p.max_in_flight for p in held.pods] == [p.max_in_flight for p in first.pods]


def test_large_change_moves_weight_smoothly_towards_target() -> None:
    first = compute_decision(
        pods=[pod("a", kv=0.1), pod("b", kv=0.1)], previous=None, settings=DEFAULTS, elapsed_s=0
    )
    changed = [pod("a", kv=0.1), pod("b", kv=0.85)]
    target = compute_decision(pods=changed, previous=None, settings=DEFAULTS, elapsed_s=0)
    step = compute_decision(pods=changed, previous=first, settings=DEFAULTS, elapsed_s=1.0)
    assert weights(target)["b"] < weights(step)["b"] < weights(first)["b"]
    settled = step
    for _ in range(200):
        settled = compute_decision(pods=changed, previous=settled, settings=DEFAULTS, elapsed_s=2)
    target_b, settled_b = weights(target)["b"], weights(settled)["b"]
    assert abs(settled_b - target_b) <= target_b * DEFAULTS.min_weight_change + 1


def test_no_smoothing_jumps_to_target() -> None:
    sharp = PolicySettings(smoothing_s=0.0)
    first = compute_decision(pods=[pod("a"), pod("b")], previous=None, settings=sharp, elapsed_s=0)
    changed = [pod("a", kv=0.1), pod("b", kv=0.89)]
    jumped = compute_decision(pods=changed, previous=first, settings=sharp, elapsed_s=0.0)
    assert jumped == compute_decision(pods=changed, previous=None, settings=sharp, elapsed_s=0)


SPEEDY = PolicySettings(speed_weight=4.0)


def _sped(name: str, *, tokens_per_s: float | None, running: float = 16.0) -> PodInput:
    base = pod(name, running=running)
    assert base.sample is not None
    sample = dataclasses.replace(base.sample, decode_tokens_per_s=tokens_per_s)
    return dataclasses.replace(base, sample=sample)


def test_slow_decoder_gets_less_weight_only_when_the_term_is_on() -> None:
    pods = [_sped(f"fast{i}", tokens_per_s=800.0) for i in range(3)]
    pods.append(_sped("slow", tokens_per_s=400.0))
    on = weights(compute_decision(pods=pods, previous=None, settings=SPEEDY, elapsed_s=2.0))
    off_settings = PolicySettings(speed_weight=0.0)
    off = weights(compute_decision(pods=pods, previous=None, settings=off_settings, elapsed_s=2.0))
    assert set(off.values()) == {DEFAULTS.weight_scale}
    assert on["fast0"] == on["fast1"] == on["fast2"] == SPEEDY.weight_scale
    # 0.5 of the best, 0.625 of the tolerance-adjusted best, to the 4th power.
    assert on["slow"] == round(SPEEDY.weight_scale * 0.625**4)


def test_speed_within_tolerance_or_unknown_or_idle_keeps_equal_weights() -> None:
    pods = [
        _sped("best", tokens_per_s=1000.0),
        _sped("close", tokens_per_s=850.0),
        _sped("unknown", tokens_per_s=None),
        _sped("idle", tokens_per_s=10.0, running=2.0),
        _sped("garbage", tokens_per_s=math.nan),
    ]
    got = weights(compute_decision(pods=pods, previous=None, settings=SPEEDY, elapsed_s=2.0))
    assert set(got.values()) == {SPEEDY.weight_scale}


@settings(max_examples=300, deadline=None)
@given(
    others=st.lists(
        st.tuples(loads, st.floats(min_value=0.0, max_value=5000.0)), min_size=0, max_size=5
    ),
    kv=loads,
    rate=st.floats(min_value=0.0, max_value=5000.0),
    slowdown=st.floats(min_value=0.0, max_value=1.0),
    running=st.floats(min_value=0.0, max_value=64.0),
    speed_weight=st.floats(min_value=0.0, max_value=10.0),
)
def test_slower_pod_never_gets_more_weight(
    others: list[tuple[float, float]],
    kv: float,
    rate: float,
    slowdown: float,
    running: float,
    speed_weight: float,
) -> None:
    tuned = PolicySettings(speed_weight=speed_weight)
    rest = [_sped(f"o{i}", tokens_per_s=r) for i, (k, r) in enumerate(others)]

    def my_weight(tokens_per_s: float) -> int:
        me = _sped("me", tokens_per_s=tokens_per_s, running=running)
        assert me.sample is not None
        me = dataclasses.replace(me, sample=dataclasses.replace(me.sample, kv_usage=kv))
        decision = compute_decision(pods=[me, *rest], previous=None, settings=tuned, elapsed_s=2.0)
        return weights(decision)["me"]

    assert my_weight(rate * (1.0 - slowdown)) <= my_weight(rate)
