"""Random sequences of set_pods / ask / release / withdraw / expire / configure / dispatch.

After every step: no grant lifts a pod above its cap (a cap lowered under the in-flight count
only waits for releases); every ask ends in exactly one Grant or Refusal, or is withdrawn, or
still waits; no request passes an earlier (or higher-priority) waiting one that may use any pod;
the stats counters add up; and nothing but SpecInvalid is ever raised, whatever the values.
Without KV data and subset hints the queue is work-conserving (a waiting request means no pod
has room), so a released slot is always reused.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from trimtab.admission import (
    Admission,
    AdmissionSettings,
    Ask,
    Grant,
    PodCapacity,
    Queued,
    Refusal,
    RequestId,
)
from trimtab.api.records import PodName
from trimtab.errors import SpecInvalid

from .builders import address

ADDRESSES = [address(n) for n in range(5)] + ["10.9.9.9:1"]

weird_numbers = st.one_of(
    st.integers(min_value=-2, max_value=12_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 1.0, math.nan, -1]),
)


class State(enum.Enum):
    WAITING = enum.auto()
    GRANTED = enum.auto()
    REFUSED = enum.auto()
    WITHDRAWN = enum.auto()


@dataclass
class Model:
    """What the test knows of every request, to judge the answers."""

    state: dict[str, State] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)
    priority: dict[str, int] = field(default_factory=dict)
    open: dict[str, bool] = field(default_factory=dict)
    pod: dict[str, str] = field(default_factory=dict)


def pod_fields(*, kv: bool, weird: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    def maybe(good: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(good, weird_numbers) if weird else good

    kv_fields = (
        {
            "kv_usage": maybe(st.one_of(st.none(), st.floats(0, 1.2))),
            "kv_observed_at": maybe(st.one_of(st.none(), st.just("now"), st.floats(0, 100))),
            "kv_capacity_tokens": maybe(
                st.one_of(st.none(), st.just(10_000), st.integers(1, 20_000))
            ),
        }
        if kv
        else {}
    )
    return st.fixed_dictionaries(
        {
            "n": st.integers(0, 4),
            "cap": maybe(st.integers(0, 3)),
            "accepting": st.booleans(),
            "speed": maybe(st.sampled_from([1.0, 2.0, 0.5])),
            **kv_fields,
        }
    )


def steps(*, kv: bool, subsets: bool) -> st.SearchStrategy[list[tuple[Any, ...]]]:
    subset = (
        st.one_of(st.none(), st.frozensets(st.sampled_from(ADDRESSES), max_size=3))
        if subsets
        else st.none()
    )
    step = st.one_of(
        st.tuples(st.just("pods"), st.lists(pod_fields(kv=kv), max_size=5)),
        st.tuples(st.just("pods"), st.lists(pod_fields(kv=kv, weird=True), max_size=2)),
        st.tuples(
            st.just("ask"),
            st.one_of(st.integers(0, 12_000), weird_numbers),
            st.integers(-1, 3),
            subset,
        ),
        st.tuples(st.just("ask"), st.integers(0, 12_000), st.integers(0, 3), subset),
        st.tuples(st.just("ask"), st.sampled_from([0, 3000, 6000]), st.just(0), st.none()),
        st.tuples(st.just("release"), st.integers(0, 40), st.one_of(st.none(), weird_numbers)),
        st.tuples(st.just("withdraw"), st.integers(0, 40)),
        st.tuples(st.just("expire")),
        st.tuples(st.just("dispatch")),
        st.tuples(st.just("tick"), st.floats(0, 20)),
        st.tuples(
            st.just("configure"),
            st.fixed_dictionaries(
                {
                    "queue_length": st.one_of(st.integers(0, 6), weird_numbers),
                    "queue_ttl_s": st.one_of(st.floats(0.5, 30), weird_numbers),
                    "kv_limit": st.one_of(st.floats(0.1, 1.0), weird_numbers),
                    "priority_classes": st.integers(0, 4),
                    "stale_after_s": st.floats(0.5, 30),
                    "max_fallbacks": st.integers(-1, 4),
                }
            ),
        ),
    )
    return st.lists(step, max_size=60)


class Driver:
    def __init__(self) -> None:
        self.admission = Admission(settings=AdmissionSettings(queue_length=4, priority_classes=2))
        self.model = Model()
        self.now = 0.0
        self.asks = 0

    def run(self, step: tuple[Any, ...]) -> None:
        before = {p.name: (p.in_flight, p.cap) for p in self.admission.stats().pods}
        kind = step[0]
        answers: list[Grant | Queued | Refusal] = []
        try:
            if kind == "pods":
                pods = [self.build_pod(dict(fields)) for fields in step[1]]
                answers = list(self.admission.set_pods(pods=pods, now=self.now))
            elif kind == "ask":
                id = f"r{self.asks}"
                self.asks += 1
                request = Ask(
                    id=RequestId(id), prompt_tokens=step[1], priority=step[2], subset=step[3]
                )
                self.asked(request)
                answers = [self.admission.ask(ask=request, now=self.now)]
            elif kind == "release":
                id = f"r{step[1]}"
                if self.model.state.get(id) is State.WAITING:
                    self.model.state[id] = State.WITHDRAWN
                answers = list(
                    self.admission.release(id=RequestId(id), now=self.now, output_tokens=step[2])
                )
            elif kind == "withdraw":
                id = f"r{step[1]}"
                if self.model.state.get(id) is State.WAITING:
                    self.model.state[id] = State.WITHDRAWN
                self.admission.withdraw(id=RequestId(id))
            elif kind == "expire":
                answers = list(self.admission.expire(now=self.now))
            elif kind == "dispatch":
                answers = list(self.admission.dispatch(now=self.now))
            elif kind == "tick":
                self.now += step[1]
            else:
                settings = AdmissionSettings(**step[1])
                answers = list(self.admission.configure(settings=settings, now=self.now))
        except SpecInvalid:
            return
        self.judge(answers, before=before)

    def build_pod(self, fields: dict[str, Any]) -> PodCapacity:
        n = fields.pop("n")
        if fields.get("kv_observed_at") == "now":  # a fresh snapshot, so the KV budget binds
            fields["kv_observed_at"] = self.now
        return PodCapacity(name=PodName(f"pod-{n}"), address=address(n), **fields)

    def asked(self, request: Ask) -> None:
        id = request.id
        self.model.order[id] = self.asks
        self.model.priority[id] = min(
            request.priority, self.admission.settings.priority_classes - 1
        )
        self.model.open[id] = request.subset is None

    def judge(
        self, answers: list[Grant | Queued | Refusal], *, before: dict[PodName, tuple[int, int]]
    ) -> None:
        model = self.model
        stats = self.admission.stats()
        pods = {p.name: p for p in stats.pods}
        for answer in answers:
            previous = model.state.get(answer.id)
            assert previous in {None, State.WAITING}, (answer, previous)
            if isinstance(answer, Grant):
                model.state[answer.id] = State.GRANTED
                model.pod[answer.id] = answer.pod
                assert pods[answer.pod].accepting
                assert pods[answer.pod].in_flight <= pods[answer.pod].cap
                assert answer.address not in answer.fallbacks
            elif isinstance(answer, Queued):
                assert previous is None
                model.state[answer.id] = State.WAITING
            else:
                model.state[answer.id] = State.REFUSED
        for name, pod in pods.items():
            old_in_flight, _ = before.get(name, (0, 0))
            assert pod.in_flight <= max(pod.cap, old_in_flight)
        waiting = [id for id, state in model.state.items() if state is State.WAITING]
        assert stats.queue_length == len(waiting)
        for answer in answers:
            if isinstance(answer, Grant):
                mine = model.priority[answer.id]
                for other in waiting:
                    ahead = model.priority[other] < mine or (
                        model.priority[other] == mine
                        and model.order[other] < model.order[answer.id]
                    )
                    assert not (ahead and model.open[other]), (answer.id, other)
        granted = sum(state is State.GRANTED for state in model.state.values())
        assert stats.asked == len(model.state)
        assert stats.asked == stats.granted + stats.refused_total + stats.withdrawn + len(waiting)
        assert stats.granted == granted
        assert stats.granted == stats.released + stats.forgotten + sum(
            p.in_flight for p in stats.pods
        )


KV_BOUND_HEAD = [
    (
        "pods",
        [
            {
                "n": 0,
                "cap": 3,
                "accepting": True,
                "speed": 1.0,
                "kv_usage": 0.0,
                "kv_observed_at": "now",
                "kv_capacity_tokens": 10_000,
            }
        ],
    ),
    ("ask", 3000, 0, None),
    ("ask", 6000, 0, None),  # waits for KV room
    ("ask", 0, 0, None),  # would fit, but must not pass the head
    ("dispatch",),
    ("release", 0, None),
]


@settings(max_examples=400, deadline=None)
@example(program=KV_BOUND_HEAD)
@given(program=steps(kv=True, subsets=True))
def test_any_sequence_keeps_the_invariants(program: list[tuple[Any, ...]]) -> None:
    driver = Driver()
    for step in program:
        driver.run(step)


@settings(max_examples=300, deadline=None)
@given(program=steps(kv=False, subsets=False))
def test_without_kv_or_subsets_a_free_slot_never_idles_while_requests_wait(
    program: list[tuple[Any, ...]],
) -> None:
    driver = Driver()
    for step in program:
        driver.run(step)
        stats = driver.admission.stats()
        if stats.queue_length:
            assert not any(p.accepting and p.in_flight < p.cap for p in stats.pods), stats
