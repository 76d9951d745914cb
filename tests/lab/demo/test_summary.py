"""The demo's per-mode summary: refusals, TPOT and cut requests in the simulator's keys."""

from __future__ import annotations

import pytest

from trimtab_lab.demo.loadgen import Outcome
from trimtab_lab.demo.summary import summarise_mode


def _outcome(*, status: int, ttft: float | None = None, e2e: float | None = None) -> Outcome:
    return Outcome(arrival_s=0.0, output_tokens=11, ttft_s=ttft, e2e_s=e2e, status=status)


def test_picker_refusals_count_as_rejected_and_tpot_is_per_decoded_token() -> None:
    result = summarise_mode(
        policy="trimtab_picker",
        outcomes=[
            _outcome(status=200, ttft=0.5, e2e=1.5),
            _outcome(status=429),
            _outcome(status=503),
            _outcome(status=400),
            _outcome(status=0),
            _outcome(status=-1, ttft=0.2),
        ],
        samples=[],
        time_scale=2.0,
        deadline_s=10.0,
        cpu={},
        loop_lag_s=0.0,
    )
    assert (result["completed"], result["rejected"], result["too_long"]) == (1, 2, 1)
    assert (result["errors"], result["unfinished"]) == (1, 1)
    # (1.5 - 0.5) wall s over 10 tokens after the first, at two model seconds per wall second.
    assert result["tpot_p99"] == pytest.approx(0.2)
    assert result["ttft_p99"] == pytest.approx(1.0, abs=0.01)
