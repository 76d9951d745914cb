"""``trimtab sim``: run a scenario file through the fleet simulator and report per balancer.

Prints a table to stdout, with a ``bound`` row (per metric the best of ``ideal`` and
``oracle``, :mod:`trimtab_lab.sim.bound`) and a warning for every realizable balancer that beats
it; optionally writes JSON (``--json``) and a figure (``--plot``). A progress bar goes to stderr
when it is a terminal. Exit status 2 on a malformed scenario or
trace, with the file, line and field in the message.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import click

from trimtab_lab.sim.bound import compute_bound, find_breaches
from trimtab_lab.sim.errors import SimulationError
from trimtab_lab.sim.running import Progress, ScenarioRun, run_scenario
from trimtab_lab.sim.scenario import PolicyName, load_scenario
from trimtab_lab.tables import results_table, table_console

__all__ = ["sim"]

_COLUMNS = (
    ("ttft_p50", "TTFT p50"),
    ("ttft_p99", "TTFT p99"),
    ("e2e_p99", "E2E p99"),
    ("tpot_p50", "TPOT p50"),
    ("tpot_p99", "TPOT p99"),
    ("throughput_tokens_per_s", "tok/s"),
    ("imbalance", "imbalance"),
    ("preemptions", "preempt"),
    ("rejected", "rejected"),
    ("completed", "done"),
    ("goodput_multiplier", "goodput ×"),
)


def _policies(_: click.Context, __: click.Parameter, value: str | None) -> list[PolicyName]:
    if not value:
        return []
    chosen = []
    for name in value.split(","):
        try:
            chosen.append(PolicyName(name.strip()))
        except ValueError:
            known = ", ".join(p.value for p in PolicyName)
            raise click.BadParameter(f"unknown policy {name.strip()!r}; known: {known}") from None
    return chosen


@click.command("sim")
@click.argument("scenario", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write results as JSON here.",
)
@click.option(
    "--plot",
    "plot_out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a PNG of KV usage over time and latency CDFs here.",
)
@click.option("--policies", callback=_policies, help="Comma-separated subset, e.g. a,b.")
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@click.option(
    "--goodput",
    is_flag=True,
    help="Also bisect each policy's goodput (p99 TTFT and TPOT under the slo); slow.",
)
def sim(
    scenario: Path,
    json_out: Path | None,
    plot_out: Path | None,
    policies: list[PolicyName],
    seed: int | None,
    goodput: bool,
) -> None:
    """Simulate SCENARIO.yaml with each balancer on identical arrivals."""
    try:
        spec = load_scenario(scenario)
        run = _run_with_progress(
            lambda progress: run_scenario(
                scenario=spec,
                base_dir=scenario.parent,
                policies=policies or None,
                seed=seed,
                goodput=goodput,
                progress=progress,
            )
        )
    except SimulationError as error:
        raise click.ClickException(str(error)) from error
    _print_table(run)
    if json_out is not None:
        json_out.write_text(json.dumps(_as_json(run, seed=seed), indent=2) + "\n")
    if plot_out is not None:
        from trimtab_lab.sim.plotting import plot_run

        plot_run(run, path=plot_out)


def _run_with_progress(work: Callable[[Progress | None], ScenarioRun]) -> ScenarioRun:
    if not sys.stderr.isatty():
        return work(None)
    from rich.progress import Progress as Bar

    with Bar(transient=True) as bar:
        task = bar.add_task("simulating", total=1.0)

        def update(label: str, fraction: float) -> None:
            bar.update(task, completed=fraction, description=label)

        progress: Progress = update
        result = work(progress)
    return result


def _as_json(run: ScenarioRun, *, seed: int | None) -> dict[str, Any]:
    scenario = run.scenario.model_dump(mode="json")
    if seed is not None:
        scenario["seed"] = seed
    scenario["requests"] = len(run.workload)
    scenario["workload_source"] = run.workload.source
    scenario["offered_rate_per_s"] = run.offered_rate_per_s
    scenario["max_rate_per_s"] = run.max_rate_per_s
    results = {name: policy.result.to_json() for name, policy in run.runs.items()}
    bound = compute_bound(results)
    return {
        "scenario": scenario,
        "policies": results,
        "bound": bound.to_json() if bound is not None else None,
        "bound_breaches": [
            vars(breach)
            for breach in (find_breaches(results=results, bound=bound) if bound else [])
        ],
    }


def _print_table(run: ScenarioRun) -> None:
    results = {name: policy.result.to_json() for name, policy in run.runs.items()}
    rows: dict[str, Mapping[str, object]] = dict(results)
    bound = compute_bound(results)
    if bound is not None:
        rows["bound"] = {key: bound.values.get(key) for key, _ in _COLUMNS}
    utilisation = run.offered_rate_per_s / run.max_rate_per_s
    table = results_table(
        title=(
            f"{run.scenario.name}: {len(run.workload)} requests, {run.offered_rate_per_s:.2f}/s "
            f"(utilisation {utilisation:.2f}), {run.workload.source}"
        ),
        results=rows,
        columns=_COLUMNS,
    )
    console = table_console()
    console.print(table)
    if bound is not None:
        for breach in find_breaches(results=results, bound=bound):
            console.print(f"warning: {breach.describe()}", markup=False)
