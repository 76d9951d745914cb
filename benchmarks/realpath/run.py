"""Real-path benchmark: each scenario through the demo harness and through the simulator.

For every ``scenarios/*.yaml`` and every seed, the exact arrivals the demo replays are written
to a CSV trace and the simulator runs a copy of the scenario on that CSV (replayed as recorded,
same fleet, same drain), so both paths see identical requests. A seed picks the trace window:
seed ``k`` starts ``(k - 1) * --window-step`` seconds into the trace (a trace has no randomness
of its own). The page ``benchmarks/results/realpath.md`` gives, per scenario, the ratios
picker/least-request (p99 TTFT, p99 TPOT, throughput) and trimtab/least-request (p99 TTFT and
E2E) of both paths as the median over the seeds with min-max, and every seed's figures.

Run: ``.venv/bin/python benchmarks/realpath/run.py [--seeds 1,2,3] [SCENARIO.yaml ...]``
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from trimtab_lab.demo.command import run_and_report
from trimtab_lab.demo.stack import Mode
from trimtab_lab.demo.workload import load_demo_scenario, workload_of
from trimtab_lab.sim.running import run_scenario
from trimtab_lab.sim.scenario import Scenario, load_scenario

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "realpath.md"
BASELINE = "least_request"
# (numerator, metric, label): the ratios the page reports, each against least-request.
RATIOS = (
    ("trimtab_picker", "ttft_p99", "picker/LR TTFT p99"),
    ("trimtab_picker", "tpot_p99", "picker/LR TPOT p99"),
    ("trimtab_picker", "throughput_tokens_per_s", "picker/LR throughput"),
    ("trimtab", "ttft_p99", "trimtab/LR TTFT p99"),
    ("trimtab", "e2e_p99", "trimtab/LR E2E p99"),
)
SHOWN = (
    ("ttft_p99", "TTFT p99"),
    ("e2e_p99", "E2E p99"),
    ("tpot_p99", "TPOT p99"),
    ("throughput_tokens_per_s", "tok/s"),
    ("preemptions", "preempt"),
    ("rejected", "refused"),
    ("unfinished", "cut"),
)
FINDINGS = "## Findings"


def _windowed(scenario: Scenario, *, seed: int, step_s: float) -> Scenario:
    trace = scenario.workload.trace
    if trace is None:
        return scenario.model_copy(update={"seed": seed})
    moved = trace.model_copy(update={"start": trace.start + (seed - 1) * step_s})
    workload = scenario.workload.model_copy(update={"trace": moved})
    return scenario.model_copy(update={"seed": seed, "workload": workload})


def _export(scenario: Scenario, out: Path) -> Path:
    """Write the demo's workload as CSV and a simulator scenario replaying it as recorded."""
    workload = workload_of(scenario)
    trace = out / f"{scenario.name}-seed{scenario.seed}.csv"
    with trace.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["arrival_s", "prompt_tokens", "output_tokens"])
        for row in zip(
            workload.arrival_s, workload.prompt_tokens, workload.output_tokens, strict=True
        ):
            writer.writerow([f"{row[0]:.6f}", int(row[1]), int(row[2])])
    data = scenario.model_dump(mode="json")
    data["workload"] = {"trace": {"path": trace.name, "format": "csv"}}
    exported = out / f"{scenario.name}-seed{scenario.seed}.yaml"
    exported.write_text(yaml.safe_dump(data, sort_keys=False))
    return exported


def _ratio(policies: dict[str, Any], *, name: str, metric: str) -> float | None:
    value, base = policies[name].get(metric), policies[BASELINE].get(metric)
    if value is None or not base:
        return None
    return float(value) / float(base)


def _spread(values: Sequence[float | None]) -> str:
    found = [v for v in values if v is not None]
    if not found:
        return "-"
    return f"{statistics.median(found):.2f} ({min(found):.2f}–{max(found):.2f})"


def _figure(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--time-scale", type=float, default=3.0)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds (trace windows)")
    parser.add_argument("--window-step", type=float, default=300.0, help="trace s per seed")
    parser.add_argument("--out", type=Path, default=HERE / "out")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    paths = args.scenarios or sorted((HERE / "scenarios").glob("*.yaml"))
    args.out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True)
    started = time.monotonic()
    command = (
        f"`.venv/bin/python benchmarks/realpath/run.py --time-scale {args.time_scale:g} "
        f"--seeds {args.seeds} --window-step {args.window_step:g}`"
    )
    lines = [
        "# Real path vs simulator",
        "",
        "Same fleet, same arrivals (exported CSV), same drain; latencies in model seconds.",
        "Ratios against least-request (LR): median over the seeds (min–max), one run per seed;",
        "a seed is a window of the trace. Real throughput counts completed requests' tokens",
        "over the whole run, the simulator's generated tokens over the arrival window: compare",
        "ratios, not figures.",
        f"Command: {command}",
        "",
    ]
    raw: dict[str, Any] = {}
    for path in paths:
        base = load_demo_scenario(path)
        modes = tuple(m for m in Mode if m.value in {p.value for p in base.policies})
        per_seed: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
        for seed in seeds:
            scenario = _windowed(base, seed=seed, step_s=args.window_step)
            exported = _export(scenario, args.out)
            replay = load_demo_scenario(exported)
            real = run_and_report(
                scenario=replay,
                time_scale=args.time_scale,
                out=args.out / f"{replay.name}-seed{seed}",
                prometheus=False,
                console=console,
                modes=modes,
            )["policies"]
            run = run_scenario(scenario=load_scenario(exported), base_dir=exported.parent)
            sim = {name: policy.result.to_json() for name, policy in run.runs.items()}
            per_seed.append((seed, real, sim))
            raw[f"{base.name}/seed{seed}"] = {"real": real, "sim": sim}
        lines += _scenario_lines(base, per_seed=per_seed)
    elapsed = time.monotonic() - started
    lines.append(f"Wall time of this run: {elapsed / 60:.1f} min.")
    lines.append("")
    (args.out / "realpath.json").write_text(json.dumps(raw, indent=2) + "\n")
    # Hand-written analysis below the tables survives a re-run.
    previous = RESULTS.read_text() if RESULTS.exists() else ""
    findings = previous[previous.find(FINDINGS) :] if FINDINGS in previous else ""
    RESULTS.write_text("\n".join(lines) + "\n" + findings)
    console.print(f"wrote {RESULTS} in {elapsed / 60:.1f} min")


def _scenario_lines(
    scenario: Scenario, *, per_seed: list[tuple[int, dict[str, Any], dict[str, Any]]]
) -> list[str]:
    lines = [
        f"## {scenario.name}",
        "",
        "| ratio | real | sim |",
        "|---|---|---|",
    ]
    for name, metric, label in RATIOS:
        if name not in per_seed[0][1]:
            continue
        real_ratios = [_ratio(r, name=name, metric=metric) for _, r, _ in per_seed]
        sim_ratios = [_ratio(s, name=name, metric=metric) for _, _, s in per_seed]
        lines.append(f"| {label} | {_spread(real_ratios)} | {_spread(sim_ratios)} |")
    header = " | ".join(h for _, h in SHOWN)
    lines += ["", f"| seed | source | policy | {header} |", "|---|---|---|" + "---|" * len(SHOWN)]
    for seed, real, sim in per_seed:
        for source, policies in (("real", real), ("sim", sim)):
            for name in real:
                values = " | ".join(_figure(policies[name].get(key)) for key, _ in SHOWN)
                lines.append(f"| {seed} | {source} | {name} | {values} |")
    lines.append("")
    return lines


if __name__ == "__main__":
    main()
