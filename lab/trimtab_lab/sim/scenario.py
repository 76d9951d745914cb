"""Scenario files: the YAML that names a fleet, a workload and the balancers to compare.

Parsed with pydantic v2; unknown keys are errors and every problem names its field path, e.g.
``fleet.overrides.0.speed``. Durations are Kubernetes/Go style strings (``"1800s"``, ``"30m"``,
``"500ms"``, ``"1h30m"``) or plain numbers of seconds. Paths are relative to the YAML file's
folder. ``docs/simulator.md`` documents every key with its default.
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from trimtab_lab.replica import PROFILE_NAMES
from trimtab_lab.sim.errors import ScenarioError
from trimtab_lab.sim.workloads import TraceFormat

__all__ = ["PolicyName", "Scenario", "load_scenario", "parse_duration", "parse_scenario"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s)")


def parse_duration(value: object) -> float:
    """Seconds from ``"1h30m"``, ``"1800s"``, ``"500ms"`` or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a string like '30s' or a number of seconds")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a duration is a string like '30s' or a number of seconds")
    text = value.strip()
    position, total = 0, 0.0
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * scale[match.group(2)]
        position = match.end()
    if position != len(text) or position == 0:
        raise ValueError(f"not a duration: {value!r} (use e.g. '1800s', '30m', '500ms')")
    return total


Duration = Annotated[float, BeforeValidator(parse_duration), Field(ge=0)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]


class PolicyName(enum.StrEnum):
    """Balancers the simulator can compare."""

    ROUND_ROBIN = "round_robin"
    LEAST_REQUEST = "least_request"
    LEAST_REQUEST_FULL_SCAN = "least_request_full_scan"
    TRIMTAB = "trimtab"
    EPP = "epp"
    IDEAL = "ideal"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplicaOverride(_Strict):
    """Make one replica different: slower, or another profile."""

    replica: int = Field(ge=0)
    speed: float | None = Field(default=None, gt=0)
    profile: str | None = None


class FleetSpec(_Strict):
    replicas: int = Field(ge=1, le=10_000)
    profile: str = "llama3-8b-h100"
    overrides: list[ReplicaOverride] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> FleetSpec:
        for name in [self.profile, *(o.profile for o in self.overrides if o.profile)]:
            if name not in PROFILE_NAMES:
                raise ValueError(f"unknown profile {name!r}; known: {', '.join(PROFILE_NAMES)}")
        for override in self.overrides:
            if override.replica >= self.replicas:
                raise ValueError(
                    f"override for replica {override.replica}, but only {self.replicas} replicas"
                )
        return self


class TraceSpec(_Strict):
    path: Path
    format: TraceFormat
    start: Duration = 0.0
    """Skip this much of the trace's beginning."""


class LengthSpec(_Strict):
    median: float = Field(gt=0)
    sigma: float = Field(default=0.0, ge=0)
    min: int = Field(default=1, ge=1)
    max: int = Field(default=1_000_000, ge=1)


class ClassSpec(_Strict):
    name: str
    share: float = Field(gt=0)
    prompt: LengthSpec
    output: LengthSpec


class ArrivalSpec(_Strict):
    cv: float = Field(default=2.0, gt=0, le=50)
    """Coefficient of variation of inter-arrival gaps (1 = Poisson)."""


class WorkloadSpec(_Strict):
    trace: TraceSpec | None = None
    mix: Literal["classic"] | list[ClassSpec] | None = None
    arrivals: ArrivalSpec = Field(default_factory=ArrivalSpec)
    utilization: float | None = Field(default=None, gt=0, le=10)
    rate: float | None = Field(default=None, gt=0)
    """Requests per second, instead of ``utilization`` (mixes only)."""

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        if (self.trace is None) == (self.mix is None):
            raise ValueError("give exactly one of 'trace' and 'mix'")
        if self.utilization is not None and self.rate is not None:
            raise ValueError("give 'utilization' or 'rate', not both")
        if self.mix is not None and self.utilization is None and self.rate is None:
            raise ValueError("a mix needs 'utilization' or 'rate'")
        if self.trace is not None and self.rate is not None:
            raise ValueError("a trace takes 'utilization' (or nothing to replay as recorded)")
        return self


class TrimtabSpec(_Strict):
    """How trimtab observes the fleet in the simulation, and its policy settings."""

    scrape_interval: PositiveDuration = 2.0
    decide_interval: PositiveDuration = 2.0
    delay: Duration = 0.25
    rate_window: PositiveDuration = 10.0
    settings: dict[str, Any] = Field(default_factory=dict)
    """PolicySettings fields (snake_case) to override."""


class SloSpec(_Strict):
    ttft_p99: PositiveDuration = 2.0
    """Goodput is the highest rate multiplier that keeps p99 TTFT at or under this."""


class Scenario(_Strict):
    name: str
    seed: int = 1
    duration: PositiveDuration
    drain: Duration = 900.0
    """After the last arrival, how long in-flight requests may run before the run stops."""
    sample_interval: PositiveDuration = 1.0
    fleet: FleetSpec
    workload: WorkloadSpec
    policies: list[PolicyName] = Field(
        default_factory=lambda: [
            PolicyName.ROUND_ROBIN,
            PolicyName.LEAST_REQUEST,
            PolicyName.TRIMTAB,
            PolicyName.EPP,
            PolicyName.IDEAL,
        ],
        min_length=1,
    )
    trimtab: TrimtabSpec = Field(default_factory=TrimtabSpec)
    slo: SloSpec = Field(default_factory=SloSpec)


def parse_scenario(data: object, *, path: Path | None = None) -> Scenario:
    """Validate already-loaded YAML data; ``ScenarioError`` lists every problem."""
    try:
        return Scenario.model_validate(data)
    except ValidationError as error:
        problems = []
        for item in error.errors():
            where = ".".join(str(part) for part in item["loc"]) or "(top level)"
            problems.append(f"{where}: {item['msg']}")
        raise ScenarioError(path=path, problems=problems) from None


def load_scenario(path: Path) -> Scenario:
    """Read and validate a scenario YAML file."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ScenarioError(path=path, problems=[f"cannot read: {error.strerror}"]) from error
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ScenarioError(path=path, problems=[f"{where}invalid YAML"]) from error
    return parse_scenario(data, path=path)
