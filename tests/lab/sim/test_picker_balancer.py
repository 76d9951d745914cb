"""``trimtab_picker``: the real admission code on the simulator's delayed observation pipeline.

Covered: with a tight policy cap no replica ever holds more requests than its cap, counted at
every send and finish, and the picker's own stats agree; below capacity nothing is lost or
refused; a queue that cannot hold the excess turns it into counted rejections. Not covered:
latency figures (benchmarks).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from trimtab_lab.sim.engine import Fleet, RequestStatus
from trimtab_lab.sim.picker_balancer import PickerBalancer
from trimtab_lab.sim.running import PolicyRun, build_workload, run_policy
from trimtab_lab.sim.scenario import PolicyName, Scenario, parse_scenario


def small(**changes: object) -> Scenario:
    data: dict[str, object] = {
        "name": "small",
        "seed": 3,
        "duration": "90s",
        "fleet": {"replicas": 3, "overrides": [{"replica": 0, "speed": 0.5}]},
        "workload": {
            "mix": [
                {"name": "short", "share": 0.7, "prompt": {"median": 300}, "output": {"median": 5}},
                {
                    "name": "long",
                    "share": 0.3,
                    "prompt": {"median": 4000},
                    "output": {"median": 400},
                },
            ],
            "utilization": 0.8,
        },
        "policies": ["trimtab_picker"],
        "trimtab": {"settings": {"max_in_flight_per_pod": 256}},
    }
    data.update(changes)
    return parse_scenario(data)


def _run(scenario: Scenario, monkeypatch: pytest.MonkeyPatch) -> tuple[PolicyRun, int, list[int]]:
    """Run the picker, recording the most requests ever held by one replica."""
    in_flight: Counter[int] = Counter()
    peak = [0]
    send, finish = Fleet.send, PickerBalancer.on_finish

    def counting_send(self: Fleet, *, request: int, host: int, now: float) -> None:
        in_flight[host] += 1
        peak[0] = max(peak[0], in_flight[host])
        send(self, request=request, host=host, now=now)

    def counting_finish(self: PickerBalancer, *, request: int, host: int, now: float) -> None:
        in_flight[host] -= 1
        finish(self, request=request, host=host, now=now)
        stats = self.admission.stats()
        assert all(pod.in_flight <= pod.cap for pod in stats.pods)

    monkeypatch.setattr(Fleet, "send", counting_send)
    monkeypatch.setattr(PickerBalancer, "on_finish", counting_finish)
    workload = build_workload(scenario=scenario, base_dir=Path("."), seed=scenario.seed)
    run = run_policy(scenario=scenario, workload=workload, policy=PolicyName.TRIMTAB_PICKER, seed=3)
    return run, len(workload), peak


def test_picker_never_exceeds_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = small(
        trimtab={
            "settings": {"max_in_flight_per_pod": 3, "min_in_flight_per_pod": 1},
            "admission": {"queue_ttl_s": 3600, "queue_length": 100_000},
        }
    )
    run, count, peak = _run(scenario, monkeypatch)
    assert peak[0] == 3
    assert run.result.completed + run.result.unfinished == count
    # The engines never held more than the cap either (sampled every second).
    record = run.record
    assert int((record.running + record.waiting).max()) <= 3


def test_picker_loses_nothing_below_capacity(monkeypatch: pytest.MonkeyPatch) -> None:
    run, count, _ = _run(small(), monkeypatch)
    result = run.result
    assert count > 100
    assert result.completed == count
    assert result.rejected == result.unfinished == 0


def test_refusals_count_as_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = small(
        trimtab={
            "settings": {"max_in_flight_per_pod": 2, "min_in_flight_per_pod": 1},
            "admission": {"queue_length": 3, "queue_ttl_s": 5},
        }
    )
    run, count, peak = _run(scenario, monkeypatch)
    status = run.record.status
    assert run.result.rejected == int(np.sum(status == RequestStatus.REJECTED)) > 0
    assert run.result.completed + run.result.rejected == count
    assert peak[0] <= 2
