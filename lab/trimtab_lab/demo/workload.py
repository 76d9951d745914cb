"""What the demo replays: a simulator scenario, its workload, and wall-clock request specs.

The demo describes its fleet and load as a simulator :class:`~trimtab_lab.sim.scenario.Scenario`,
so ``trimtab sim`` can run the very same fleet and arrivals (the real-path benchmark does).
Scenario times are model seconds; the emulators run ``time_scale`` model seconds per wall
second, so arrivals are divided by it before they are sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trimtab_lab.demo.loadgen import RequestSpec
from trimtab_lab.sim.running import build_workload, fleet_specs
from trimtab_lab.sim.scenario import PolicyName, Scenario, load_scenario, parse_scenario
from trimtab_lab.sim.workloads import (
    TraceFormat,
    Workload,
    compress,
    max_request_rate,
    slice_window,
)

__all__ = [
    "DEMO_POLICIES",
    "KV_BOUND_TRACE",
    "DemoLoad",
    "default_trace",
    "demo_scenario",
    "load_demo_scenario",
    "replica_speeds",
    "request_specs",
    "shared_trace",
    "workload_of",
]

DEMO_POLICIES = (
    PolicyName.ROUND_ROBIN,
    PolicyName.LEAST_REQUEST,
    PolicyName.TRIMTAB,
    PolicyName.TRIMTAB_PICKER,
)
_DEFAULT_TRACE = "azure-llm-2023-conv.csv"
KV_BOUND_TRACE = "mooncake-conversation.jsonl"
"""Long prompts (median ~7k tokens): the KV-bound scenario's trace in ``../shared/traces``."""


@dataclass(frozen=True, kw_only=True)
class DemoLoad:
    """The knobs of ``trimtab demo`` that shape the fleet and the load (model time)."""

    replicas: int
    slow_speed: float
    """Speed of the last replica (1.0: all equal)."""
    profile: str
    trace: Path | None
    trace_format: TraceFormat
    utilization: float
    duration_s: float
    """Model seconds of arrivals."""
    seed: int
    decide_interval_s: float
    """Model seconds between trimtab's decisions (its ``metrics.interval`` times the scale)."""
    drain_s: float
    """Model seconds after the last arrival before open requests are cut."""
    name: str = "demo"


def default_trace() -> Path | None:
    """The Azure conversation trace in ``../shared/traces`` beside the checkout, if present."""
    return shared_trace(_DEFAULT_TRACE)


def shared_trace(name: str) -> Path | None:
    """The trace ``name`` in ``../shared/traces`` beside the checkout, if present."""
    # lab/trimtab_lab/demo/workload.py -> the checkout is three folders up.
    checkout = Path(__file__).resolve().parents[3]
    candidate = checkout.parent / "shared" / "traces" / name
    return candidate if candidate.is_file() else None


def demo_scenario(load: DemoLoad) -> Scenario:
    """The scenario the demo runs, in the simulator's own schema."""
    workload: dict[str, object] = {"utilization": load.utilization}
    if load.trace is not None:
        workload["trace"] = {"path": str(load.trace.resolve()), "format": load.trace_format.value}
    else:
        workload["mix"] = "classic"
    overrides = []
    if load.slow_speed != 1.0:
        overrides.append({"replica": load.replicas - 1, "speed": load.slow_speed})
    return parse_scenario(
        {
            "name": load.name,
            "seed": load.seed,
            "duration": load.duration_s,
            "drain": load.drain_s,
            "sample_interval": 0.5,
            "fleet": {"replicas": load.replicas, "profile": load.profile, "overrides": overrides},
            "workload": workload,
            "policies": [p.value for p in DEMO_POLICIES],
            "trimtab": {
                "scrape_interval": load.decide_interval_s,
                "decide_interval": load.decide_interval_s,
            },
        }
    )


def load_demo_scenario(path: Path) -> Scenario:
    """A scenario file (as for ``trimtab sim``), its trace path made absolute."""
    scenario = load_scenario(path)
    trace = scenario.workload.trace
    if trace is not None and not trace.path.is_absolute():
        absolute = trace.model_copy(update={"path": (path.parent / trace.path).resolve()})
        workload = scenario.workload.model_copy(update={"trace": absolute})
        scenario = scenario.model_copy(update={"workload": workload})
    return scenario


def workload_of(scenario: Scenario) -> Workload:
    """The scenario's arrivals as ``trimtab sim`` builds them, rescaled to its window.

    The simulator scales a trace to the utilisation over the whole trace, so a short window
    (minutes of a one-hour trace) can be far lighter or heavier than asked. The demo's runs
    are short, so it compresses the window itself to the target utilisation. The real-path
    benchmark hands the simulator this exact workload as a CSV trace.
    """
    target = scenario.workload.utilization
    if scenario.workload.trace is None or target is None:
        return build_workload(scenario=scenario, base_dir=Path.cwd(), seed=scenario.seed)
    # Four windows' worth, so compressing still fills the whole window.
    longer = scenario.model_copy(update={"duration": scenario.duration * 4})
    workload = build_workload(scenario=longer, base_dir=Path.cwd(), seed=scenario.seed)
    # Keep the first rate x duration requests and compress them to end at the window's end;
    # the rate is sized on the requests kept (a fixed point, reached in a few rounds).
    count = len(workload) - 1
    for _ in range(4):
        rate = target * max_request_rate(
            replicas=fleet_specs(scenario),
            prompt_tokens=workload.prompt_tokens[:count],
            output_tokens=workload.output_tokens[:count],
        )
        count = min(len(workload) - 1, max(2, round(rate * scenario.duration)))
    factor = float(workload.arrival_s[count]) / scenario.duration
    return slice_window(compress(workload, factor=factor), duration_s=scenario.duration)


def replica_speeds(scenario: Scenario) -> list[float]:
    """Speed of each replica, overrides applied (the emulators take one per replica)."""
    return [spec.speed for spec in fleet_specs(scenario)]


def request_specs(workload: Workload, *, time_scale: float) -> Sequence[RequestSpec]:
    """The workload in wall-clock seconds for the load generator."""
    return [
        RequestSpec(
            arrival_s=float(arrival) / time_scale, prompt_tokens=int(p), output_tokens=int(o)
        )
        for arrival, p, o in zip(
            workload.arrival_s, workload.prompt_tokens, workload.output_tokens, strict=True
        )
    ]
