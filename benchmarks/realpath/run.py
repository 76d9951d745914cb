"""Real-path benchmark: each scenario through the demo harness and through the simulator.

For every ``scenarios/*.yaml`` the exact arrivals the demo replays are written to a CSV trace,
and the simulator runs a copy of the scenario on that CSV (replayed as recorded, same fleet,
same drain), so both see identical requests. The page ``benchmarks/results/realpath.md``
compares p99 latencies and the ratios trimtab/round-robin and trimtab/least-request.

Run: ``.venv/bin/python benchmarks/realpath/run.py [--time-scale 3] [SCENARIO.yaml ...]``
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from trimtab_lab.demo.command import run_and_report
from trimtab_lab.demo.workload import load_demo_scenario, workload_of
from trimtab_lab.sim.running import run_scenario
from trimtab_lab.sim.scenario import load_scenario

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results" / "realpath.md"
METRICS = ("ttft_p99", "e2e_p99")
# Where the two paths may disagree before the page flags it.
TOLERANCE = 0.20
FINDINGS = "## Findings"


def _export(scenario_path: Path, out: Path) -> Path:
    """Write the demo's workload as CSV and a simulator scenario replaying it as recorded."""
    scenario = load_demo_scenario(scenario_path)
    workload = workload_of(scenario)
    trace = out / f"{scenario.name}.csv"
    with trace.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["arrival_s", "prompt_tokens", "output_tokens"])
        for row in zip(
            workload.arrival_s, workload.prompt_tokens, workload.output_tokens, strict=True
        ):
            writer.writerow([f"{row[0]:.6f}", int(row[1]), int(row[2])])
    data = scenario.model_dump(mode="json")
    data["workload"] = {"trace": {"path": trace.name, "format": "csv"}}
    exported = out / f"{scenario.name}.yaml"
    exported.write_text(yaml.safe_dump(data, sort_keys=False))
    return exported


def _ratios(policies: dict[str, Any], metric: str) -> tuple[float, float]:
    trimtab = policies["trimtab"][metric]
    return trimtab / policies["round_robin"][metric], trimtab / policies["least_request"][metric]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", type=Path)
    parser.add_argument("--time-scale", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=HERE / "out")
    args = parser.parse_args()
    paths = args.scenarios or sorted((HERE / "scenarios").glob("*.yaml"))
    args.out.mkdir(parents=True, exist_ok=True)
    lines = [
        "# Real path vs simulator",
        "",
        "Same fleet, same arrivals (exported CSV), same drain; p99 in model seconds.",
        f"Command: `.venv/bin/python benchmarks/realpath/run.py --time-scale {args.time_scale:g}`",
        "",
    ]
    console = Console(stderr=True)
    for path in paths:
        exported = _export(path, args.out)
        scenario = load_demo_scenario(exported)
        real = run_and_report(
            scenario=scenario,
            time_scale=args.time_scale,
            out=args.out / scenario.name,
            prometheus=False,
            console=console,
        )["policies"]
        run = run_scenario(scenario=load_scenario(exported), base_dir=exported.parent)
        sim = {name: policy.result.to_json() for name, policy in run.runs.items()}
        lines += [
            f"## {scenario.name}",
            "",
            "| source | policy | TTFT p99 | E2E p99 |",
            "|---|---|---|---|",
        ]
        for source, policies in (("real", real), ("sim", sim)):
            for name in ("round_robin", "least_request", "trimtab"):
                p = policies[name]
                lines.append(f"| {source} | {name} | {p['ttft_p99']:.2f} | {p['e2e_p99']:.2f} |")
        lines += ["", "| ratio | real | sim | disagreement |", "|---|---|---|---|"]
        for metric in METRICS:
            for index, label in enumerate(("trimtab/round_robin", "trimtab/least_request")):
                r, s = _ratios(real, metric)[index], _ratios(sim, metric)[index]
                gap = abs(r - s) / s
                flag = f"{gap:.0%}" + (" **> 20 %**" if gap > TOLERANCE else "")
                lines.append(f"| {label} {metric} | {r:.2f} | {s:.2f} | {flag} |")
        lines.append("")
    # Hand-written analysis below the tables survives a re-run.
    previous = RESULTS.read_text() if RESULTS.exists() else ""
    findings = previous[previous.find(FINDINGS) :] if FINDINGS in previous else ""
    RESULTS.write_text("\n".join(lines) + "\n" + findings)
    console.print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
