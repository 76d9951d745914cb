"""The bound of a report: per metric the better of ``ideal`` and ``oracle``; breaches flagged.

Covered: lower-is-better metrics take the minimum and higher-is-better the maximum, each with
the reference it came from; missing figures and missing references; a realizable balancer
beating the bound by more than the noise margin is reported, within it is not, and the
references themselves never are. Not covered: the figures of real runs (benchmarks).
"""

from __future__ import annotations

from trimtab_lab.sim.bound import NOISE, compute_bound, find_breaches

Figures = dict[str, float | int | None]

IDEAL: Figures = {
    "ttft_p99": 10.0,
    "tpot_p99": 0.05,
    "throughput_tokens_per_s": 900.0,
    "preemptions": 40,
    "rejected": 0,
    "goodput_multiplier": 1.2,
}
ORACLE: Figures = {
    "ttft_p99": 4.0,
    "tpot_p99": 0.08,
    "throughput_tokens_per_s": 1000.0,
    "preemptions": 0,
    "rejected": 0,
    "goodput_multiplier": None,
}


def test_bound_is_the_best_reference_per_metric() -> None:
    bound = compute_bound({"ideal": IDEAL, "oracle": ORACLE, "least_request": {"ttft_p99": 1.0}})
    assert bound is not None
    assert bound.values["ttft_p99"] == 4.0 and bound.sources["ttft_p99"] == "oracle"
    assert bound.values["tpot_p99"] == 0.05 and bound.sources["tpot_p99"] == "ideal"
    assert bound.values["throughput_tokens_per_s"] == 1000.0
    assert bound.sources["throughput_tokens_per_s"] == "oracle"
    assert bound.values["preemptions"] == 0 and bound.sources["preemptions"] == "oracle"
    # Ties go to the first reference; a figure only one reference has comes from it.
    assert bound.sources["rejected"] == "ideal"
    assert bound.values["goodput_multiplier"] == 1.2
    assert bound.sources["goodput_multiplier"] == "ideal"
    assert bound.to_json()["ttft_p99_from"] == "oracle"


def test_bound_from_one_reference_or_none() -> None:
    only = compute_bound({"ideal": IDEAL, "trimtab": ORACLE})
    assert only is not None and only.values["ttft_p99"] == 10.0
    assert compute_bound({"trimtab": ORACLE}) is None


def test_beating_the_bound_beyond_noise_is_a_breach() -> None:
    results: dict[str, Figures] = {
        "ideal": IDEAL,
        "oracle": ORACLE,
        # ttft 4 % better than the bound: noise; throughput 10 % above it: a breach.
        "trimtab_picker": {"ttft_p99": 4.0 * 0.96, "throughput_tokens_per_s": 1100.0},
        "least_request": {"ttft_p99": 4.0 * (1 - NOISE) * 0.9, "tpot_p99": 0.2},
    }
    bound = compute_bound(results)
    assert bound is not None
    breaches = {(b.policy, b.metric) for b in find_breaches(results=results, bound=bound)}
    assert breaches == {
        ("trimtab_picker", "throughput_tokens_per_s"),
        ("least_request", "ttft_p99"),
    }
    described = find_breaches(results=results, bound=bound)[0].describe()
    assert "bug in the bound" in described
