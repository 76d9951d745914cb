"""From a scenario to results: build the fleet and workload, run each balancer, search goodput.

Every balancer replays the very same workload (common random numbers) on a fresh fleet; its own
randomness comes from a generator seeded by the scenario seed and the balancer's name, so a run
is deterministic for a seed and adding a balancer does not change the others' results.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from trimtab.admission import AdmissionSettings
from trimtab.errors import SpecInvalid
from trimtab.policy import PolicySettings
from trimtab_lab.replica import Replica, get_profile
from trimtab_lab.sim.balancers import EndpointPicker, SharedQueue, envoy_baseline
from trimtab_lab.sim.engine import Balancer, RunRecord, simulate
from trimtab_lab.sim.envoy import LbAlgorithm
from trimtab_lab.sim.errors import ScenarioError
from trimtab_lab.sim.oracle import Oracle
from trimtab_lab.sim.picker_balancer import PickerBalancer
from trimtab_lab.sim.prefix_running import PREFIX_POLICIES, build_prefix_workload, prefix_balancer
from trimtab_lab.sim.results import PolicyResult, summarise
from trimtab_lab.sim.scenario import PolicyName, Scenario
from trimtab_lab.sim.trimtab_balancer import Observation, TrimtabBalancer
from trimtab_lab.sim.workloads import (
    Lengths,
    ReplicaSpec,
    RequestClass,
    TraceFormat,
    Workload,
    classic_mix,
    generate_mix,
    max_request_rate,
    read_trace,
    scale_to_utilisation,
    slice_window,
)
from trimtab_lab.sim.workloads.mixes import draw_requests

__all__ = ["PolicyRun", "ScenarioRun", "build_workload", "fleet_specs", "run_scenario"]

# Requests drawn to estimate a mix's mean request size before generating it.
_SIZING_SAMPLE = 20_000
# Bisection steps of the goodput search over rate multipliers in [low, high].
_GOODPUT_STEPS = 6
_GOODPUT_RANGE = (0.25, 2.0)

Progress = Callable[[str, float], None]
"""Called with a label and the fraction of the scenario's work done."""


@dataclass(frozen=True, eq=False, kw_only=True)
class PolicyRun:
    """One balancer's result and its raw record (kept for plots)."""

    result: PolicyResult
    record: RunRecord


@dataclass(frozen=True, eq=False, kw_only=True)
class ScenarioRun:
    """All balancers' runs on one workload."""

    scenario: Scenario
    workload: Workload
    offered_rate_per_s: float
    max_rate_per_s: float
    runs: dict[str, PolicyRun] = field(default_factory=dict)


def fleet_specs(scenario: Scenario) -> list[ReplicaSpec]:
    """Each replica's profile and speed, overrides applied."""
    spec = scenario.fleet
    replicas = [ReplicaSpec(profile=get_profile(spec.profile)) for _ in range(spec.replicas)]
    for override in spec.overrides:
        current = replicas[override.replica]
        replicas[override.replica] = ReplicaSpec(
            profile=get_profile(override.profile) if override.profile else current.profile,
            speed=override.speed if override.speed is not None else current.speed,
        )
    return replicas


def build_workload(
    *, scenario: Scenario, base_dir: Path, seed: int, rate_multiplier: float = 1.0
) -> Workload:
    """The scenario's requests over its duration; ``rate_multiplier`` scales arrival rate."""
    spec = scenario.workload
    replicas = fleet_specs(scenario)
    duration = scenario.duration
    if spec.conversations is not None or spec.shared_prefix is not None:
        return build_prefix_workload(
            spec=spec,
            replicas=replicas,
            duration_s=duration,
            seed=seed,
            rate_multiplier=rate_multiplier,
        )
    if spec.trace is not None:
        path = spec.trace.path if spec.trace.path.is_absolute() else base_dir / spec.trace.path
        trace = read_trace(path=path, trace_format=TraceFormat(spec.trace.format))
        if spec.trace.start > 0:
            trace = slice_window(trace, start_s=spec.trace.start, duration_s=trace.span_s + 1)
        if spec.utilization is None:
            if rate_multiplier != 1.0:
                raise ScenarioError(path=None, problems=["goodput needs workload.utilization"])
            return slice_window(trace, duration_s=duration)
        return scale_to_utilisation(
            trace,
            utilisation=spec.utilization * rate_multiplier,
            replicas=replicas,
            duration_s=duration,
        )
    classes = _mix_classes(scenario)
    if spec.rate is not None:
        rate = spec.rate
    else:
        assert spec.utilization is not None
        prompt, output = draw_requests(
            classes=classes, count=_SIZING_SAMPLE, rng=np.random.default_rng(seed + 1)
        )
        rate = spec.utilization * max_request_rate(
            replicas=replicas, prompt_tokens=prompt, output_tokens=output
        )
    return generate_mix(
        classes=classes,
        rate_per_s=rate * rate_multiplier,
        duration_s=duration,
        cv=spec.arrivals.cv,
        seed=seed,
    )


def _mix_classes(scenario: Scenario) -> tuple[RequestClass, ...]:
    mix = scenario.workload.mix
    if mix == "classic" or mix is None:
        return classic_mix()
    return tuple(
        RequestClass(
            name=c.name,
            share=c.share,
            prompt=_lengths(c.prompt.median, c.prompt.sigma, c.prompt.min, c.prompt.max),
            output=_lengths(c.output.median, c.output.sigma, c.output.min, c.output.max),
        )
        for c in mix
    )


def _lengths(median: float, sigma: float, low: int, high: int) -> Lengths:
    try:
        return Lengths(median=median, sigma=sigma, minimum=low, maximum=high)
    except ValueError as error:
        raise ScenarioError(path=None, problems=[f"workload.mix: {error}"]) from None


def policy_settings(scenario: Scenario) -> PolicySettings:
    """The scenario's PolicySettings overrides applied to the defaults."""
    try:
        return PolicySettings(**scenario.trimtab.settings)
    except TypeError as error:
        raise ScenarioError(path=None, problems=[f"trimtab.settings: {error}"]) from None
    except ValueError as error:
        raise ScenarioError(path=None, problems=[f"trimtab.settings.{error}"]) from None


def admission_settings(scenario: Scenario) -> AdmissionSettings:
    """The scenario's AdmissionSettings overrides applied to the defaults."""
    try:
        return AdmissionSettings(**scenario.trimtab.admission)
    except TypeError as error:
        raise ScenarioError(path=None, problems=[f"trimtab.admission: {error}"]) from None
    except SpecInvalid as error:
        raise ScenarioError(path=None, problems=[f"trimtab.admission: {error}"]) from None


def _balancer(*, policy: PolicyName, scenario: Scenario, hosts: int, seed: int) -> Balancer:
    rng = random.Random(seed * 1_000_003 + zlib.crc32(policy.value.encode()))
    if policy is PolicyName.ROUND_ROBIN:
        return envoy_baseline(algorithm=LbAlgorithm.ROUND_ROBIN, hosts=hosts, rng=rng)
    if policy is PolicyName.LEAST_REQUEST:
        return envoy_baseline(algorithm=LbAlgorithm.LEAST_REQUEST, hosts=hosts, rng=rng)
    if policy is PolicyName.LEAST_REQUEST_FULL_SCAN:
        return envoy_baseline(algorithm=LbAlgorithm.LEAST_REQUEST_FULL_SCAN, hosts=hosts, rng=rng)
    if policy is PolicyName.EPP:
        return EndpointPicker(rng=rng)
    if policy is PolicyName.IDEAL:
        return SharedQueue()
    if policy is PolicyName.ORACLE:
        return Oracle()
    spec = scenario.trimtab
    observation = Observation(
        scrape_interval_s=spec.scrape_interval,
        decide_interval_s=spec.decide_interval,
        delay_s=spec.delay,
        rate_window_s=spec.rate_window,
    )
    if policy in PREFIX_POLICIES:
        return prefix_balancer(
            policy=policy,
            scenario=scenario,
            hosts=hosts,
            rng=rng,
            settings=policy_settings(scenario),
            observation=observation,
        )
    if policy in (PolicyName.TRIMTAB_PICKER, PolicyName.TRIMTAB_PICKER_AFFINITY):
        return PickerBalancer(
            hosts=hosts,
            settings=policy_settings(scenario),
            admission=admission_settings(scenario),
            observation=observation,
            affinity=policy is PolicyName.TRIMTAB_PICKER_AFFINITY,
        )
    return TrimtabBalancer(
        hosts=hosts, settings=policy_settings(scenario), observation=observation, rng=rng
    )


def run_policy(
    *,
    scenario: Scenario,
    workload: Workload,
    policy: PolicyName,
    seed: int,
    progress: Callable[[float], None] | None = None,
) -> PolicyRun:
    """Simulate one balancer on ``workload`` with a fresh fleet."""
    specs = fleet_specs(scenario)
    block = workload.prefix_block_tokens if scenario.fleet.prefix_caching else None
    replicas = [Replica(profile=s.profile, speed=s.speed, prefix_block_tokens=block) for s in specs]
    record = simulate(
        replicas=replicas,
        workload=workload,
        balancer_factory=lambda: _balancer(
            policy=policy, scenario=scenario, hosts=len(specs), seed=seed
        ),
        duration_s=scenario.duration,
        drain_s=scenario.drain,
        sample_interval_s=scenario.sample_interval,
        progress=progress,
    )
    return PolicyRun(
        result=summarise(policy=policy.value, record=record, duration_s=scenario.duration),
        record=record,
    )


def meets_slo(*, result: PolicyResult, scenario: Scenario) -> bool:
    """Whether p99 TTFT and p99 TPOT are both at or under the scenario's SLO."""
    ttft, tpot = result.ttft.p99, result.tpot.p99
    slo = scenario.slo
    # No request of two or more tokens leaves TPOT undefined, which constrains nothing.
    tpot_ok = bool(np.isnan(tpot) or tpot <= slo.tpot_p99)
    return bool(np.isfinite(ttft) and ttft <= slo.ttft_p99) and tpot_ok


def search_goodput(*, scenario: Scenario, base_dir: Path, policy: PolicyName, seed: int) -> float:
    """Highest rate multiplier in the search range that meets the joint SLO (bisection).

    Returns the low end of the range when even that misses the SLO, the high end when even that
    meets it.
    """
    low, high = _GOODPUT_RANGE

    def meets(multiplier: float) -> bool:
        workload = build_workload(
            scenario=scenario, base_dir=base_dir, seed=seed, rate_multiplier=multiplier
        )
        run = run_policy(scenario=scenario, workload=workload, policy=policy, seed=seed)
        return meets_slo(result=run.result, scenario=scenario)

    if meets(high):
        return high
    if not meets(low):
        return low
    for _ in range(_GOODPUT_STEPS):
        middle = (low + high) / 2
        low, high = (middle, high) if meets(middle) else (low, middle)
    return low


def run_scenario(
    *,
    scenario: Scenario,
    base_dir: Path,
    policies: Sequence[PolicyName] | None = None,
    seed: int | None = None,
    goodput: bool = False,
    progress: Progress | None = None,
) -> ScenarioRun:
    """Run every requested balancer on the scenario's workload."""
    seed = scenario.seed if seed is None else seed
    chosen = list(policies) if policies else list(scenario.policies)
    workload = build_workload(scenario=scenario, base_dir=base_dir, seed=seed)
    specs = fleet_specs(scenario)
    max_rate = max_request_rate(
        replicas=specs, prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens
    )
    run = ScenarioRun(
        scenario=scenario,
        workload=workload,
        offered_rate_per_s=len(workload) / scenario.duration,
        max_rate_per_s=max_rate,
    )
    for index, policy in enumerate(chosen):

        def report(fraction: float, index: int = index, label: str = policy.value) -> None:
            if progress is not None:
                progress(label, (index + min(fraction, 1.0)) / len(chosen))

        result = run_policy(
            scenario=scenario, workload=workload, policy=policy, seed=seed, progress=report
        )
        if goodput:
            multiplier = search_goodput(
                scenario=scenario, base_dir=base_dir, policy=policy, seed=seed
            )
            result = PolicyRun(
                result=replace(
                    result.result,
                    goodput_multiplier=multiplier,
                    goodput_rate_per_s=multiplier * run.offered_rate_per_s,
                ),
                record=result.record,
            )
        run.runs[policy.value] = result
    return run
