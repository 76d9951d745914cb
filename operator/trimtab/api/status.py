"""The InferencePool status: conditions, the per-pod table and summary figures.

Written by the controller (rate-limited) and read back on restart to restore the last
decision before anything is pushed to Envoy. Conditions follow ``metav1.Condition``.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

__all__ = [
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "InferencePoolStatus",
    "PodStatus",
]


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class ConditionType(enum.StrEnum):
    READY = "Ready"
    METRICS_AVAILABLE = "MetricsAvailable"
    TARGETS_SYNCED = "TargetsSynced"
    DEGRADED = "Degraded"


class ConditionStatus(enum.StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """``metav1.Condition``: lastTransitionTime moves only when ``status`` flips."""

    type: str = Field(min_length=1, max_length=316)
    status: ConditionStatus
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: str = Field(
        description="RFC 3339 time of the last status flip.",
        json_schema_extra={"format": "date-time"},
    )
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*)?$")
    message: str = Field(default="", max_length=32768)


class PodStatus(_Model):
    """One row of the per-pod table: what trimtab saw and what it decided."""

    name: str
    address: str = ""
    weight: int = Field(ge=0)
    max_in_flight: int = Field(ge=0)
    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    prefix_hit_rate: float | None = Field(
        default=None, description="Prompt tokens served from the prefix cache, 0..1."
    )
    state: str
    reason: str = ""


class AdmissionStatus(_Model):
    """The picker's view of the pool (``spec.admission.mode: picker``), as of the last write."""

    queue_length: int = Field(ge=0, description="Requests waiting in the pool's shared queue.")
    in_flight: int = Field(ge=0, description="Requests admitted and not yet ended.")
    granted: int = Field(ge=0, description="Requests admitted since the picker started.")
    shed: int = Field(
        ge=0, description="Requests refused with 429 (queue full or timed out) since it started."
    )


class InferencePoolStatus(_Model):
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    pods: list[PodStatus] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    ready_pods: int = Field(default=0, ge=0, description="Pods counted as Ready members.")
    max_kv_usage: float | None = Field(default=None, description="Highest KV usage seen, 0..1.")
    weight_spread: float | None = Field(
        default=None, description="Highest weight divided by lowest weight."
    )
    last_decision_time: str | None = Field(default=None, description="RFC 3339.")
    admission: AdmissionStatus | None = Field(
        default=None, description="The endpoint picker's queue and counts (admission on)."
    )
