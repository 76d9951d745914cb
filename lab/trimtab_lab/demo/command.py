"""``trimtab demo``: round-robin, least-request, trimtab and trimtab's picker, side by side.

It starts N replica emulators, a real Envoy and (for trimtab) the operator in local mode over
xDS, for trimtab_picker with its endpoint picker behind Envoy's ext_proc, replays one workload
through each mode on cold replicas with live load bars, then prints a table and writes
``demo.json`` (the simulator's keys, model seconds) and ``demo.png``.
``--scenario kv-bound`` replays the Mooncake trace's long prompts near saturation instead;
``--scenario FILE`` runs a simulator scenario (the real-path benchmark uses it).
Every process it started is stopped on exit, on failure and on Ctrl-C.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live

from trimtab import tasks
from trimtab_lab.demo.harness import DemoPlan, ModeRun, run_demo
from trimtab_lab.demo.live import LiveState, progress_line, render
from trimtab_lab.demo.plotting import ModeTrace, plot_demo
from trimtab_lab.demo.stack import Mode, StackPlan
from trimtab_lab.demo.workload import (
    KV_BOUND_TRACE,
    DemoLoad,
    default_trace,
    demo_scenario,
    load_demo_scenario,
    replica_speeds,
    request_specs,
    shared_trace,
    workload_of,
)
from trimtab_lab.processes import ComponentFailed
from trimtab_lab.replica import get_profile
from trimtab_lab.sim.running import fleet_specs
from trimtab_lab.sim.scenario import Scenario
from trimtab_lab.sim.workloads import TraceFormat, max_request_rate
from trimtab_lab.tables import results_table, table_console

__all__ = ["demo"]

_PROFILE = "llama3-8b-a10g"
# (model seconds of arrivals, time scale) of the default and the quick run. Scale 3, not
# more: at 5 the single emulator process (8 replicas, ~7k SSE chunks per wall second) and the
# load generator stalled for seconds on this 2-core machine and every mode's tail measured
# that; at 3 the real path matches the simulator (benchmarks/results/realpath.md).
_FULL = (240.0, 3.0)
_QUICK = (55.0, 3.0)
# Wall seconds after the last arrival before open requests are cut.
_DRAIN_S = 7.0
KV_BOUND = "kv-bound"
# The KV-bound option: the Mooncake conversation trace (prompts ~7k tokens; an A10G replica
# holds ~40k tokens of KV, i.e. about five of them) at this share of the fleet's capacity.
# Requests take ~13 model s each, so they get a longer drain (model s) before the cut.
_KV_BOUND_UTILIZATION = 0.9
_KV_BOUND_DRAIN_S = 90.0
_UTILIZATION = 0.7
# trimtab's metrics.interval in wall seconds, the floor the CRD allows. At time scale 3 this
# is 0.3 model seconds: the simulator shows (conv trace, slow replica) 2.5 model-second-old
# metrics lose trimtab its edge over least-request on the end-to-end tail.
_METRICS_INTERVAL_S = 0.1
# Shipped policy defaults (the simulator uses the same) with two exceptions. Slow start is off
# because the simulator treats replicas as Ready for an hour, and a cold start would only
# measure the ramp. speedWeight is on because this fleet is known to mix speeds (one replica
# at 0.6), which is what docs/policy.md recommends it for: over 10 seeds of this scenario in
# the simulator it took trimtab's p99 e2e from 32.2 to 29.6 model s (least-request: 31.3).
_POLICY: dict[str, Any] = {"slowStart": "0s", "speedWeight": 4}
# Harness stalls beyond these (wall s) mean a mode's latencies include the machine's hiccups.
_LOOP_LAG_WARN_S = 0.2
_SCRAPE_WARN_S = 0.5
# Without live bars (a file, a pipe, CI) a progress line this often, so the run is seen to move.
_PROGRESS_EVERY_S = 10.0
_COLUMNS = (
    ("ttft_p50", "TTFT p50"),
    ("ttft_p95", "TTFT p95"),
    ("ttft_p99", "TTFT p99"),
    ("e2e_p50", "E2E p50"),
    ("e2e_p95", "E2E p95"),
    ("e2e_p99", "E2E p99"),
    ("tpot_p99", "TPOT p99"),
    ("throughput_tokens_per_s", "tok/s"),
    ("preemptions", "preempt"),
    ("imbalance", "imbalance"),
    ("completed", "done"),
    ("rejected", "refused"),
    ("unfinished", "cut"),
    ("errors", "err"),
)


@click.command("demo")
@click.option("--quick", is_flag=True, help="A shorter run (about 90 s in total).")
@click.option("--replicas", type=click.IntRange(2, 64), default=8, show_default=True)
@click.option(
    "--slow-speed",
    type=click.FloatRange(0.05, 1.0),
    default=0.6,
    show_default=True,
    help="Speed of the last replica (1: all equal).",
)
@click.option("--profile", default=_PROFILE, show_default=True, help="Replica profile.")
@click.option(
    "--trace",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Trace to replay (default: ../shared/traces/azure-llm-2023-conv.csv if present).",
)
@click.option(
    "--format",
    "trace_format",
    type=click.Choice([f.value for f in TraceFormat]),
    default=TraceFormat.AZURE.value,
    show_default=True,
)
@click.option("--mix", type=click.Choice(["classic"]), help="Replay the classic mix instead.")
@click.option(
    "--utilization",
    type=click.FloatRange(0.05, 3.0),
    help=f"Share of the fleet's capacity (default {_UTILIZATION}; {KV_BOUND}: "
    f"{_KV_BOUND_UTILIZATION}).",
)
@click.option(
    "--time-scale",
    type=click.FloatRange(0.01, 100.0),
    help="Model seconds per wall second (default 3).",
)
@click.option("--duration", type=click.FloatRange(1.0), help="Model seconds of arrivals.")
@click.option(
    "--scenario",
    "scenario_name",
    metavar=f"{KV_BOUND}|FILE",
    help=f"{KV_BOUND}: long prompts from the Mooncake trace near saturation (KV-bound); FILE: "
    "run this simulator scenario's fleet and workload (overrides the load options).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("demo-out"),
    show_default=True,
)
@click.option("--prometheus", is_flag=True, help="trimtab reads a real Prometheus (scrape 1s).")
@click.option("--seed", type=int, default=1, show_default=True)
def demo(
    *,
    quick: bool,
    replicas: int,
    slow_speed: float,
    profile: str,
    trace: Path | None,
    trace_format: str,
    mix: str | None,
    utilization: float | None,
    time_scale: float | None,
    duration: float | None,
    scenario_name: str | None,
    out: Path,
    prometheus: bool,
    seed: int,
) -> None:
    """Compare round-robin, least-request, trimtab and its picker on real Envoy and emulators."""
    preset_duration, preset_scale = _QUICK if quick else _FULL
    scale = time_scale or preset_scale
    kv_bound = scenario_name == KV_BOUND
    if scenario_name is not None and not kv_bound:
        scenario_file = Path(scenario_name)
        if not scenario_file.is_file():
            raise click.BadParameter(
                f"neither {KV_BOUND!r} nor a scenario file", param_hint="--scenario"
            )
        scenario = load_demo_scenario(scenario_file)
    else:
        chosen = None if mix else (trace or default_trace())
        chosen_format = TraceFormat(trace_format)
        if kv_bound:
            chosen, chosen_format = shared_trace(KV_BOUND_TRACE), TraceFormat.MOONCAKE
            if chosen is None:
                raise click.ClickException(f"{KV_BOUND} needs ../shared/traces/{KV_BOUND_TRACE}")
        scenario = demo_scenario(
            DemoLoad(
                replicas=replicas,
                slow_speed=slow_speed,
                profile=profile,
                trace=chosen,
                trace_format=chosen_format,
                utilization=utilization or (_KV_BOUND_UTILIZATION if kv_bound else _UTILIZATION),
                duration_s=duration or preset_duration,
                seed=seed,
                decide_interval_s=_METRICS_INTERVAL_S * scale,
                drain_s=_KV_BOUND_DRAIN_S if kv_bound else _DRAIN_S * scale,
                name=KV_BOUND if kv_bound else "demo",
            )
        )
    console = Console(stderr=True)
    try:
        payload = run_and_report(
            scenario=scenario, time_scale=scale, out=out, prometheus=prometheus, console=console
        )
    except ComponentFailed as exc:
        raise click.ClickException(str(exc)) from exc
    _print_table(payload, console=table_console())


def run_and_report(
    *,
    scenario: Scenario,
    time_scale: float,
    out: Path,
    prometheus: bool,
    console: Console,
    modes: tuple[Mode, ...] = tuple(Mode),
) -> dict[str, Any]:
    """Run ``modes``, write ``demo.json`` and ``demo.png`` into ``out``; return the JSON.

    Open requests are cut the scenario's ``drain`` after the last arrival.
    """
    workload = workload_of(scenario)
    if len(workload) == 0:
        raise click.ClickException("the workload has no requests; raise --duration")
    speeds = tuple(replica_speeds(scenario))
    requests = request_specs(workload, time_scale=time_scale)
    plan = DemoPlan(
        stack=StackPlan(
            speeds=speeds,
            profile=scenario.fleet.profile,
            time_scale=time_scale,
            metrics_interval_s=scenario.trimtab.decide_interval / time_scale,
            policy=dict(_POLICY),
            prometheus=prometheus,
        ),
        requests=requests,
        deadline_s=requests[-1].arrival_s + scenario.drain / time_scale,
        out=out,
        modes=modes,
    )
    out.mkdir(parents=True, exist_ok=True)
    live = LiveState()
    if console.is_terminal:
        with Live(get_renderable=lambda: render(live), console=console, refresh_per_second=2):
            runs = asyncio.run(_main(plan=plan, live=live))
    else:
        # No live bars into a file or pipe: rich would redraw into the log for nothing.
        console.print(f"running {', '.join(m.value for m in plan.modes)} ...")
        runs = asyncio.run(_main(plan=plan, live=live, progress=console))
    for note in {n for run in runs for n in run.notes}:
        console.print(f"note: {note}")
    payload = {
        "scenario": _scenario_json(scenario, workload_len=len(workload), plan=plan),
        "policies": {run.mode.value: run.result for run in runs},
    }
    (out / "demo.json").write_text(json.dumps(payload, indent=2) + "\n")
    plot_demo(
        modes={r.mode.value: ModeTrace(outcomes=r.outcomes, samples=r.samples) for r in runs},
        time_scale=time_scale,
        speeds=speeds,
        title=f"{scenario.name}: {workload_of(scenario).source}, time scale {time_scale:g}",
        path=out / "demo.png",
    )
    console.print(f"wrote {out / 'demo.json'} and {out / 'demo.png'}")
    return payload


async def _main(
    *, plan: DemoPlan, live: LiveState, progress: Console | None = None
) -> list[ModeRun]:
    # SIGTERM like Ctrl-C: cancel the run so every process group stops its children.
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    if task is not None:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    printer = None
    if progress is not None:
        printer = tasks.start(_print_progress(live=live, console=progress), name="demo progress")
    try:
        return await run_demo(plan=plan, live=live)
    finally:
        await tasks.stop(printer)
        loop.remove_signal_handler(signal.SIGTERM)


async def _print_progress(*, live: LiveState, console: Console) -> None:
    """A line whenever a mode or its phase changes, and every ``_PROGRESS_EVERY_S`` between."""
    loop = asyncio.get_running_loop()
    shown: tuple[int, str] | None = None
    last = 0.0
    while True:
        now = loop.time()
        if (live.mode_index, live.phase) != shown or now - last >= _PROGRESS_EVERY_S:
            shown, last = (live.mode_index, live.phase), now
            console.print(progress_line(live), markup=False, highlight=False)
        await asyncio.sleep(1.0)


def _scenario_json(scenario: Scenario, *, workload_len: int, plan: DemoPlan) -> dict[str, Any]:
    workload = workload_of(scenario)
    fleet = [r for r in fleet_specs(scenario)]
    max_rate = max_request_rate(
        replicas=fleet, prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens
    )
    data = scenario.model_dump(mode="json")
    data.update(
        {
            "requests": workload_len,
            "workload_source": workload.source,
            "offered_rate_per_s": workload_len / scenario.duration,
            "max_rate_per_s": max_rate,
            "harness": "real path: emulators + Envoy 1.40 + trimtab over xDS",
            "time_scale": plan.stack.time_scale,
            "units": (
                "seconds of model time: wall seconds measured by the load generator times "
                "time_scale (the emulators run time_scale model seconds per wall second)"
            ),
            "deadline_model_s": plan.deadline_s * plan.stack.time_scale,
            "metrics_interval_wall_s": plan.stack.metrics_interval_s,
            "policy": plan.stack.policy,
            "metrics_source": "prometheus" if plan.stack.prometheus else "direct",
            "kv_capacity_tokens": get_profile(scenario.fleet.profile).kv_capacity_tokens,
        }
    )
    return data


def _print_table(payload: dict[str, Any], *, console: Console) -> None:
    scenario = payload["scenario"]
    table = results_table(
        title=(
            f"{scenario['requests']} requests, {scenario['workload_source']}, utilisation "
            f"{scenario['offered_rate_per_s'] / scenario['max_rate_per_s']:.2f} "
            f"(latencies in model seconds, time scale {scenario['time_scale']:g})"
        ),
        results=payload["policies"],
        columns=_COLUMNS,
    )
    console.print(table)
    console.print(
        "refused: 503 (no endpoint) and 429 (shed by the picker's queue); err: other answers "
        "that were not a stream; cut: open at the deadline"
    )
    for name, result in payload["policies"].items():
        cpu = ", ".join(f"{k} {v:.2f}" for k, v in result["cpu"].items())
        console.print(f"CPU cores used during {name}: {cpu}")
    for name, result in payload["policies"].items():
        lag = result["harness"]
        if (
            lag["loadgen_loop_lag_max_s"] > _LOOP_LAG_WARN_S
            or lag["emulator_scrape_max_s"] > _SCRAPE_WARN_S
        ):
            console.print(
                f"warning: during {name} the harness stalled (load generator loop "
                f"{lag['loadgen_loop_lag_max_s']:.2f}s, emulator /metrics "
                f"{lag['emulator_scrape_max_s']:.2f}s wall): its latencies include the stall; "
                "is the machine busy? Re-run, or lower --time-scale."
            )
