"""TPOT and goodput at the joint SLO, on hand-made records and results.

Covered: TPOT is ``(e2e - ttft) / (output - 1)`` over served requests of two or more output
tokens, a request still decoding at the stop counts up to the stop, rejected ones and one-token
ones are left out; the joint SLO needs both p99 TTFT and p99 TPOT within bounds; the goodput
search returns the largest multiplier meeting it, to within one bisection step. Not covered:
goodput figures of real scenarios (benchmarks).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trimtab_lab.sim import running
from trimtab_lab.sim.engine import RequestStatus, RunRecord
from trimtab_lab.sim.results import summarise, time_per_output_token
from trimtab_lab.sim.scenario import PolicyName, Scenario, parse_scenario
from trimtab_lab.stats import Percentiles

DONE, LIVE, REFUSED = RequestStatus.COMPLETED, RequestStatus.UNFINISHED, RequestStatus.REJECTED


def record() -> RunRecord:
    nan = np.nan
    return RunRecord(
        arrival_s=np.array([0.0, 1.0, 2.0, 3.0, 4.0]),
        first_token_s=np.array([0.5, 1.2, 2.1, nan, 5.0]),
        finish_s=np.array([2.5, 1.2, nan, 3.0, 9.0]),
        scheduled_s=np.array([0.4, 1.1, 2.0, nan, 4.5]),
        status=np.array([DONE, DONE, LIVE, REFUSED, DONE], dtype=np.int64),
        output_tokens=np.array([5, 1, 11, 7, 9], dtype=np.int64),
        host=np.array([0, 0, 1, -1, 1], dtype=np.int64),
        sample_s=np.array([0.0, 1.0]),
        running=np.zeros((2, 2), dtype=np.int64),
        waiting=np.zeros((2, 2), dtype=np.int64),
        kv_usage=np.zeros((2, 2)),
        generated_tokens=np.array([0, 10], dtype=np.int64),
        preemptions=0,
        end_s=12.1,
    )


def test_tpot_of_each_request() -> None:
    # 0: (2.5 - 0.5) / 4; 1: one token, left out; 2: still decoding, (12.1 - 2.1) / 10;
    # 3: refused; 4: (9 - 5) / 8.
    assert time_per_output_token(record()).tolist() == pytest.approx([0.5, 1.0, 0.5])
    result = summarise(policy="x", record=record(), duration_s=2.0)
    assert result.tpot.p50 == pytest.approx(0.5)
    assert result.tpot.p99 == pytest.approx(np.percentile([0.5, 1.0, 0.5], 99))
    assert result.to_json()["tpot_p99"] == pytest.approx(result.tpot.p99)


def _scenario(**slo: str) -> Scenario:
    return parse_scenario(
        {
            "name": "s",
            "duration": "60s",
            "fleet": {"replicas": 1},
            "workload": {"mix": "classic", "utilization": 0.5},
            "slo": slo,
        }
    )


def test_joint_slo_needs_both_bounds() -> None:
    scenario = _scenario(ttft_p99="2s", tpot_p99="50ms")
    base = summarise(policy="x", record=record(), duration_s=2.0)

    def with_p99(ttft: float, tpot: float) -> bool:
        result = replace(
            base,
            ttft=Percentiles(p50=0, p90=0, p95=0, p99=ttft),
            tpot=Percentiles(p50=0, p90=0, p95=0, p99=tpot),
        )
        return running.meets_slo(result=result, scenario=scenario)

    assert with_p99(2.0, 0.05)
    assert not with_p99(2.1, 0.01)
    assert not with_p99(0.1, 0.06)
    # Nothing of two tokens or more: TPOT constrains nothing; no TTFT at all meets nothing.
    assert with_p99(1.0, np.nan)
    assert not with_p99(np.nan, 0.01)


def test_goodput_search_finds_the_largest_multiplier_meeting_the_slo(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TTFT meets the SLO up to a 1.3x rate, TPOT up to 1.1x: goodput is 1.1x."""
    scenario = _scenario(ttft_p99="2s", tpot_p99="50ms")
    base = summarise(policy="x", record=record(), duration_s=2.0)

    def fake_workload(*, rate_multiplier: float = 1.0, **_: object) -> float:
        return rate_multiplier

    def fake_run(*, workload: float, **_: object) -> running.PolicyRun:
        ttft = 1.0 if workload <= 1.3 else 3.0
        tpot = 0.04 if workload <= 1.1 else 0.06
        result = replace(
            base,
            ttft=Percentiles(p50=0, p90=0, p95=0, p99=ttft),
            tpot=Percentiles(p50=0, p90=0, p95=0, p99=tpot),
        )
        return running.PolicyRun(result=result, record=record())

    monkeypatch.setattr(running, "build_workload", fake_workload)
    monkeypatch.setattr(running, "run_policy", fake_run)
    found = running.search_goodput(
        scenario=scenario, base_dir=Path("."), policy=PolicyName.IDEAL, seed=1
    )
    low, high = running._GOODPUT_RANGE
    step = (high - low) / 2**running._GOODPUT_STEPS
    assert 1.1 - step <= found <= 1.1
