"""Scenario files: the YAML that names a fleet, a workload and the balancers to compare.

Parsed with pydantic v2; unknown keys are errors and every problem names its field path, e.g.
``fleet.overrides.0.speed``. Durations are strings in the CRD's grammar
(:func:`trimtab.api.durations.parse_duration`: ``"1800s"``, ``"30m"``, ``"500ms"``, ``"1h30m"``)
or plain numbers of seconds. Paths are relative to the YAML file's folder.
``docs/simulator.md`` documents every key with its default.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

from trimtab.api.durations import parse_duration
from trimtab_lab.replica import PROFILE_NAMES
from trimtab_lab.sim.errors import ScenarioError
from trimtab_lab.sim.prefix_specs import AffinitySpec, ConversationSpec, SharedPrefixSpec
from trimtab_lab.sim.workloads import TraceFormat

__all__ = ["PolicyName", "Scenario", "load_scenario", "parse_scenario"]


def _seconds(value: object) -> object:
    # Strings follow the CRD's grammar; anything else is left to float's (strict) validation.
    return parse_duration(value) if isinstance(value, str) else value


Duration = Annotated[float, BeforeValidator(_seconds), Strict(), Field(ge=0)]
PositiveDuration = Annotated[float, BeforeValidator(_seconds), Strict(), Field(gt=0)]


class PolicyName(enum.StrEnum):
    """Balancers the simulator can compare."""

    ROUND_ROBIN = "round_robin"
    LEAST_REQUEST = "least_request"
    LEAST_REQUEST_FULL_SCAN = "least_request_full_scan"
    TRIMTAB = "trimtab"
    EPP = "epp"
    IDEAL = "ideal"
    TRIMTAB_PICKER = "trimtab_picker"
    TRIMTAB_PICKER_AFFINITY = "trimtab_picker_affinity"
    ORACLE = "oracle"
    PREFIX_SCORER = "prefix_scorer"
    RING_HASH = "ring_hash"
    TRIMTAB_RING = "trimtab_ring"
    IDEAL_PREFIX = "ideal_prefix"


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
    prefix_caching: bool = False
    """Engines cache prompt prefixes (vLLM APC, SGLang radix cache) at the workload's blocks."""

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
    conversations: ConversationSpec | None = None
    shared_prefix: SharedPrefixSpec | None = None
    arrivals: ArrivalSpec = Field(default_factory=ArrivalSpec)
    utilization: float | None = Field(default=None, gt=0, le=10)
    rate: float | None = Field(default=None, gt=0)
    """Requests per second, instead of ``utilization`` (mixes only)."""

    @model_validator(mode="after")
    def _check(self) -> WorkloadSpec:
        kinds = (self.trace, self.mix, self.conversations, self.shared_prefix)
        if sum(kind is not None for kind in kinds) != 1:
            raise ValueError(
                "give exactly one of 'trace', 'mix', 'conversations' and 'shared_prefix'"
            )
        if self.utilization is not None and self.rate is not None:
            raise ValueError("give 'utilization' or 'rate', not both")
        if self.trace is None and self.utilization is None and self.rate is None:
            raise ValueError("a generated workload needs 'utilization' or 'rate'")
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
    admission: dict[str, Any] = Field(default_factory=dict)
    """AdmissionSettings fields (snake_case) to override, for ``trimtab_picker``."""


class SloSpec(_Strict):
    """The joint SLO of goodput: the highest rate multiplier meeting both bounds."""

    ttft_p99: PositiveDuration = 2.0
    """p99 time to first token must stay at or under this."""
    tpot_p99: PositiveDuration = 0.1
    """p99 time per output token must stay at or under this."""


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
            PolicyName.TRIMTAB_PICKER,
            PolicyName.ORACLE,
        ],
        min_length=1,
    )
    trimtab: TrimtabSpec = Field(default_factory=TrimtabSpec)
    slo: SloSpec = Field(default_factory=SloSpec)
    affinity: AffinitySpec = Field(default_factory=AffinitySpec)


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
