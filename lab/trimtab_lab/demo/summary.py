"""Reduce one mode's outcomes and samples to the simulator's result keys, in model seconds.

The keys and units match :meth:`trimtab_lab.sim.results.PolicyResult.to_json` (both reduce
through :mod:`trimtab_lab.stats`): ``ttft_p99``, ``e2e_p50``, ... in seconds of model time
(wall seconds times the time scale), ``imbalance`` as the time average of max/mean KV usage
over busy samples. As in the simulator, a request
cut by the run's deadline counts with the time it had waited (a lower bound), so a balancer
cannot look better by never finishing. TPOT is ``(e2e - ttft) / (output - 1)`` of completed
requests of two or more output tokens. The demo cannot see engine queue time: ``queue_*`` are
``None``. ``rejected`` counts 503s and the picker's 429s (the simulator's refusals),
``errors`` every other answer that was neither a stream nor a cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trimtab_lab.demo.loadgen import Outcome
from trimtab_lab.demo.watching import Sample
from trimtab_lab.stats import Percentiles, imbalance

__all__ = ["summarise_mode"]

# No endpoint ready (503), shed by the picker's queue (429).
_REFUSED = (503, 429)


def summarise_mode(
    *,
    policy: str,
    outcomes: Sequence[Outcome],
    samples: Sequence[Sample],
    time_scale: float,
    deadline_s: float,
    cpu: Mapping[str, float],
    loop_lag_s: float,
) -> dict[str, Any]:
    """One mode's JSON object: the simulator's keys plus ``errors``, ``cpu``, ``wall_s`` and
    ``harness`` (how far the load generator's and the emulators' event loops lagged, wall s).
    """
    ttft: list[float] = []
    e2e: list[float] = []
    tpot: list[float] = []
    completed = rejected = too_long = unfinished = errors = tokens = 0
    for outcome in outcomes:
        if outcome.ok and outcome.e2e_s is not None:
            completed += 1
            tokens += outcome.output_tokens
            e2e.append(outcome.e2e_s * time_scale)
            ttft.append((outcome.ttft_s or outcome.e2e_s) * time_scale)
            if outcome.ttft_s is not None and outcome.output_tokens >= 2:
                decode_s = outcome.e2e_s - outcome.ttft_s
                tpot.append(decode_s * time_scale / (outcome.output_tokens - 1))
        elif outcome.status == -1:
            unfinished += 1
            waited = max(0.0, deadline_s - outcome.arrival_s) * time_scale
            e2e.append(waited)
            ttft.append(outcome.ttft_s * time_scale if outcome.ttft_s is not None else waited)
        elif outcome.status in _REFUSED:
            rejected += 1
        elif outcome.status == 400:
            too_long += 1
        else:
            errors += 1
    preemptions = 0.0
    if samples:
        preemptions = sum(r.preemptions for r in samples[-1].replicas) - sum(
            r.preemptions for r in samples[0].replicas
        )
    run_s = (samples[-1].at_s if samples else deadline_s) * time_scale
    return {
        "policy": policy,
        **Percentiles.of(ttft).flat("ttft"),
        **Percentiles.of(e2e).flat("e2e"),
        **Percentiles.of(tpot).flat("tpot"),
        **Percentiles.of([]).flat("queue"),
        "throughput_tokens_per_s": tokens / run_s if run_s > 0 else 0.0,
        "imbalance": imbalance([[r.kv for r in s.replicas] for s in samples]),
        "preemptions": int(preemptions),
        "completed": completed,
        "rejected": rejected,
        "too_long": too_long,
        "unfinished": unfinished,
        "goodput_multiplier": None,
        "errors": errors,
        "cpu": dict(cpu),
        "wall_s": round(samples[-1].at_s, 2) if samples else None,
        "harness": {
            "loadgen_loop_lag_max_s": round(loop_lag_s, 3),
            "emulator_scrape_max_s": round(max((s.scrape_s for s in samples), default=0.0), 3),
        },
    }
