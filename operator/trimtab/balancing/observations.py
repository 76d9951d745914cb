"""What one tick of a pool's loop saw and decided, as handed from the loop to the reporter.

An :class:`Observation` is the reporter's only input; a :class:`MetricsProblem` says why the
metrics were not usable this tick as a kind (the ``MetricsAvailable`` reason) plus a message,
so no module has to read a reason back out of a message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from trimtab.admission import AdmissionStats
from trimtab.api.reasons import MetricsReason
from trimtab.api.records import Decision, PodName, PodSample
from trimtab.balancing.membership import Member
from trimtab.targets.base import TargetState

__all__ = ["MetricsProblem", "Observation"]


@dataclass(frozen=True, kw_only=True)
class MetricsProblem:
    """Why this tick's metrics read gave nothing usable."""

    kind: MetricsReason
    """``SourceUnavailable`` or ``NoSeries``; never ``MetricsRead``."""
    message: str
    """For the condition and the event; at most 256 characters."""

    def __post_init__(self) -> None:
        if self.kind is MetricsReason.METRICS_READ:
            raise ValueError("a metrics problem cannot be MetricsRead")


@dataclass(frozen=True, kw_only=True)
class Observation:
    """Everything one tick of a pool's loop saw and decided."""

    generation: int | None
    spec_problems: tuple[str, ...] = ()
    """Non-empty when the spec is invalid; the rest is then ignored."""
    members: Sequence[Member] = ()
    decision: Decision | None = None
    samples: Mapping[PodName, PodSample] = field(default_factory=dict)
    metrics_problem: MetricsProblem | None = None
    """Why the metrics were not usable this tick; ``None`` when they were."""
    targets: Sequence[tuple[str, TargetState]] = ()
    admission: AdmissionStats | None = None
    """The picker's counts for the pool after this tick's decision; ``None`` when off."""
