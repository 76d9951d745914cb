"""The reporter: conditions and events on transitions only, and throttled status writes.

Aspects: each condition's reason for each situation; events fire on a flip and not while a
state persists (MetricsStale, MetricsRecovered, NoReadyPods, TargetSyncFailed, SpecInvalid
when its message changes, PodWarming, PodDrained, Rebalanced past ``rebalance_change``); a
pending target is not a failure; the spam filter caps repeats; a write is due at once for a
flip or a new generation, after ``min_write_interval_s`` for a material change only, after
``heartbeat_s`` anyway, and again until one is confirmed; a seed keeps its transition times.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass

import pytest

from balancing.conftest import EPOCH, POOL, member
from trimtab.admission import AdmissionStats, RefusalReason
from trimtab.api.reasons import MetricsReason, TargetReason
from trimtab.api.records import Decision, PodDecision, PodName, PodSample, PodState
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.observations import MetricsProblem, Observation
from trimtab.balancing.reporting import Report, Reporter, ReportSettings
from trimtab.balancing.spamfilter import SpamFilter
from trimtab.targets.base import TargetState

SETTINGS = ReportSettings(
    min_write_interval_s=5.0, heartbeat_s=60.0, weight_change=0.1, rebalance_change=0.25
)
MEMBERS = (member("a"), member("b"))
DOWN = MetricsProblem(kind=MetricsReason.SOURCE_UNAVAILABLE, message="connection refused")
SYNCED = ("envoy:llama", TargetState(True, TargetReason.SYNCED))


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime.datetime:
        return EPOCH + datetime.timedelta(seconds=self.now)


def decision(weights: dict[str, int], state: PodState = PodState.SERVING) -> Decision:
    return Decision(
        pods=tuple(
            PodDecision(name=PodName(n), weight=w, max_in_flight=64, state=state, reason="")
            for n, w in weights.items()
        )
    )


def seen(
    weights: dict[str, int] | None = None,
    *,
    generation: int = 1,
    problem: MetricsProblem | None = None,
    targets: tuple[tuple[str, TargetState], ...] = (SYNCED,),
    state: PodState = PodState.SERVING,
) -> Observation:
    weights = {"a": 1000, "b": 1000} if weights is None else weights
    return Observation(
        generation=generation,
        members=[m for m in MEMBERS if m.endpoint.name in weights],
        decision=decision(weights, state),
        samples={PodName(n): PodSample(kv_usage=0.5) for n in weights},
        metrics_problem=problem,
        targets=targets,
    )


class Harness:
    def __init__(self, *, seed: InferencePoolStatus | None = None, burst: int = 10) -> None:
        self.clock = Clock()
        self.reporter = Reporter(
            pool=POOL,
            spam=SpamFilter(burst=burst, clock=self.clock),
            settings=SETTINGS,
            clock=self.clock,
            wall=self.clock.wall,
            seed=seed,
        )

    def observe(self, observation: Observation, *, at: float, confirm: bool = True) -> Report:
        self.clock.now = at
        report = self.reporter.observe(observation)
        if report.write and confirm:
            self.reporter.confirm_written(report.status)
        return report


def conditions(report: Report) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in report.status.conditions}


def reasons(report: Report) -> list[str]:
    return [event.reason for event in report.events]


def test_a_healthy_pool_has_all_conditions_well() -> None:
    report = Harness().observe(seen(), at=0)
    assert conditions(report) == {
        "Ready": ("True", "Balancing"),
        "MetricsAvailable": ("True", "MetricsRead"),
        "TargetsSynced": ("True", "Synced"),
        "Degraded": ("False", "AsExpected"),
    }
    assert report.events == ()  # a first good observation announces nothing
    assert report.write


def test_metrics_stale_fires_once_then_recovered_once() -> None:
    harness = Harness()
    harness.observe(seen(), at=0)
    down = [harness.observe(seen(problem=DOWN), at=t) for t in (2, 4, 6)]
    assert [reasons(r) for r in down] == [["MetricsStale"], [], []]
    assert conditions(down[0])["MetricsAvailable"] == ("False", "SourceUnavailable")
    assert conditions(down[0])["Degraded"] == ("True", "Degraded")
    assert "connection refused" in down[0].events[0].message
    up = [harness.observe(seen(), at=t) for t in (8, 10)]
    assert [reasons(r) for r in up] == [["MetricsRecovered"], []]


def test_a_new_metrics_reason_is_a_new_stale_event() -> None:
    harness = Harness()
    harness.observe(seen(problem=DOWN), at=0)
    none = MetricsProblem(kind=MetricsReason.NO_SERIES, message="no series")
    report = harness.observe(seen(problem=none), at=2)
    assert reasons(report) == ["MetricsStale"]
    assert conditions(report)["MetricsAvailable"] == ("False", "NoSeries")


def test_no_ready_pods_fires_on_the_flip() -> None:
    harness = Harness()
    harness.observe(seen(), at=0)
    empty = Observation(generation=1, decision=Decision(), targets=(SYNCED,))
    first, again = harness.observe(empty, at=2), harness.observe(empty, at=4)
    assert conditions(first)["Ready"] == ("False", "NoReadyPods")
    assert (reasons(first), reasons(again)) == (["NoReadyPods"], [])


def test_a_pending_target_is_not_a_failure_but_a_failing_one_is() -> None:
    harness = Harness()
    pending = ("envoy:llama", TargetState(False, TargetReason.PENDING, "not applied yet"))
    report = harness.observe(seen(targets=(pending,)), at=0)
    assert conditions(report)["TargetsSynced"] == ("True", "Synced")
    nack = ("envoy:llama", TargetState(False, TargetReason.ENVOY_NACK, "bad weight"))
    failed = harness.observe(seen(targets=(nack,)), at=2)
    assert conditions(failed)["TargetsSynced"] == ("False", "EnvoyNack")
    assert reasons(failed) == ["TargetSyncFailed"]
    assert failed.events[0].message == "envoy:llama: bad weight"
    assert reasons(harness.observe(seen(targets=(nack,)), at=4)) == []


def test_spec_invalid_repeats_only_when_the_problems_change() -> None:
    harness = Harness()
    bad = Observation(generation=1, spec_problems=("spec.policy.weightScale: too big",))
    worse = Observation(generation=2, spec_problems=("spec.targets: missing",))
    got = [harness.observe(o, at=t) for t, o in enumerate((bad, bad, worse))]
    assert [reasons(r) for r in got] == [["SpecInvalid"], [], ["SpecInvalid"]]
    assert conditions(got[0]) == {"Ready": ("False", "SpecInvalid")}


def test_pods_entering_warming_or_draining_are_announced() -> None:
    harness = Harness()
    harness.observe(seen(), at=0)
    warming = harness.observe(seen(state=PodState.WARMING), at=2)
    assert reasons(warming) == ["PodWarming", "PodWarming"]
    assert reasons(harness.observe(seen(state=PodState.WARMING), at=4)) == []
    drained = harness.observe(seen(state=PodState.DRAINING), at=6)
    assert reasons(drained) == ["PodDrained", "PodDrained"]


@pytest.mark.parametrize(("weight", "announced"), [(900, False), (700, True)])
def test_rebalanced_only_past_the_rebalance_change(weight: int, announced: bool) -> None:
    harness = Harness()
    harness.observe(seen({"a": 1000, "b": 1000}), at=0)
    report = harness.observe(seen({"a": weight, "b": 1000}), at=2)
    assert reasons(report) == (["Rebalanced"] if announced else [])
    if announced:
        assert report.events[0].message == "a 1000→700 (kv 0.50)"


def test_the_spam_filter_caps_repeated_events() -> None:
    harness = Harness(burst=2)
    flaps = []
    for tick in range(6):
        flaps += reasons(harness.observe(seen(problem=DOWN if tick % 2 == 0 else None), at=tick))
    assert flaps.count("MetricsStale") == 2


def test_a_condition_flip_is_written_at_once() -> None:
    harness = Harness()
    harness.observe(seen(), at=0)
    assert harness.observe(seen(problem=DOWN), at=0.5).write


def test_a_new_generation_is_written_at_once() -> None:
    harness = Harness()
    harness.observe(seen(), at=0)
    assert harness.observe(seen(generation=2), at=0.5).write


@pytest.mark.parametrize(
    ("weight", "at", "write"),
    [
        (1000, 10.0, False),  # nothing changed, heartbeat not due
        (1050, 10.0, False),  # 5 %: not material
        (800, 1.0, False),  # material, but too soon after the last write
        (800, 5.0, True),  # material and due
        (1000, 60.0, True),  # the heartbeat
    ],
)
def test_writes_are_throttled(weight: int, at: float, write: bool) -> None:
    harness = Harness()
    harness.observe(seen({"a": 1000, "b": 1000}), at=0)
    assert harness.observe(seen({"a": weight, "b": 1000}), at=at).write is write


def test_a_pod_joining_is_material() -> None:
    harness = Harness()
    harness.observe(seen({"a": 1000}), at=0)
    assert harness.observe(seen({"a": 1000, "b": 1000}), at=5.0).write


def test_an_unconfirmed_write_is_due_again() -> None:
    harness = Harness()
    assert harness.observe(seen(), at=0, confirm=False).write
    assert harness.observe(seen(), at=1, confirm=False).write
    assert harness.observe(seen(), at=2).write
    assert not harness.observe(seen(), at=3).write


def test_the_status_table_and_figures() -> None:
    report = Harness().observe(seen({"a": 1000, "b": 250}), at=0)
    status = report.status
    assert [(p.name, p.address, p.weight, p.kv_usage) for p in status.pods] == [
        ("a", "10.0.0.1", 1000, 0.5),
        ("b", "10.0.0.1", 250, 0.5),
    ]
    assert (status.ready_pods, status.weight_spread, status.max_kv_usage) == (2, 4.0, 0.5)
    assert status.last_decision_time == "2025-01-01T00:00:00Z"


def test_a_seed_keeps_its_transition_times_and_announces_nothing() -> None:
    first = Harness().observe(seen(), at=0).status
    harness = Harness(seed=first)
    report = harness.observe(seen(), at=100)
    assert report.events == ()
    before = {c.type: c.last_transition_time for c in first.conditions}
    assert {c.type: c.last_transition_time for c in report.status.conditions} == before


def _admission(*, shed_full: int, queued: int = 0) -> AdmissionStats:
    refused = dict.fromkeys(RefusalReason, 0)
    refused[RefusalReason.QUEUE_FULL] = shed_full
    return AdmissionStats(
        pods=(),
        queue_length=queued,
        queued_by_priority=(queued,),
        asked=100 + shed_full,
        granted=100,
        queued=queued,
        refused=refused,
        withdrawn=0,
        released=100,
        forgotten=0,
    )


def test_queue_shedding_is_announced_once_and_its_end_too() -> None:
    harness = Harness()
    found = []
    for tick, shed in enumerate((0, 0, 5, 9, 9, 9)):
        observation = dataclasses.replace(seen(), admission=_admission(shed_full=shed, queued=3))
        report = harness.observe(observation, at=tick * 2.0)
        found += [r for r in reasons(report) if r.startswith("Queue")]
        assert report.status.admission is not None
        assert report.status.admission.shed == shed
    assert found == ["QueueShedding", "QueueRecovered"]
