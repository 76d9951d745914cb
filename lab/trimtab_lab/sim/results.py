"""Statistics of one simulated run: latency percentiles, throughput, imbalance, rejections.

Latencies are in seconds. TTFT runs from arrival to the first token, end-to-end to the last,
queue time to the start of the iteration that first scheduled the request (proxy, shared queue
and engine queue together). A request still in flight when the run stops counts with the time
it had waited so far (a lower bound), so a balancer cannot look better by never finishing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from trimtab_lab.sim.engine import RequestStatus, RunRecord
from trimtab_lab.sim.workloads.base import FloatArray

__all__ = ["Percentiles", "PolicyResult", "summarise"]

# Samples where the fleet's mean KV usage is below this are idle and say nothing about balance.
_BUSY_KV = 0.01


@dataclass(frozen=True, kw_only=True)
class Percentiles:
    """p50/p90/p95/p99 of a latency, seconds (NaN when there were no requests)."""

    p50: float
    p90: float
    p95: float
    p99: float

    @classmethod
    def of(cls, values: FloatArray) -> Percentiles:
        if len(values) == 0:
            return cls(p50=np.nan, p90=np.nan, p95=np.nan, p99=np.nan)
        p50, p90, p95, p99 = np.percentile(values, [50, 90, 95, 99])
        return cls(p50=float(p50), p90=float(p90), p95=float(p95), p99=float(p99))


@dataclass(frozen=True, kw_only=True)
class PolicyResult:
    """One balancer's outcome on a scenario."""

    policy: str
    ttft: Percentiles
    e2e: Percentiles
    queue: Percentiles
    throughput_tokens_per_s: float
    """Output tokens generated fleet-wide per second over the arrival window."""
    imbalance: float
    """Time average of max/mean KV usage across replicas (1 = perfectly even)."""
    preemptions: int
    completed: int
    rejected: int
    """503s from Envoy's pending-queue overflow."""
    too_long: int
    unfinished: int
    goodput_multiplier: float | None = None
    """Largest arrival-rate multiplier keeping p99 TTFT under the SLO, when searched."""

    def to_json(self) -> dict[str, float | int | str | None]:
        """Flat JSON object: ``ttft_p99``, ``e2e_p50``, ``queue_p99``, ... (seconds)."""
        flat: dict[str, float | int | str | None] = {}
        for key, value in asdict(self).items():
            if isinstance(value, dict):
                flat.update({f"{key}_{k}": _finite(v) for k, v in value.items()})
            else:
                flat[key] = _finite(value) if isinstance(value, float) else value
        return flat


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def summarise(*, policy: str, record: RunRecord, duration_s: float) -> PolicyResult:
    """Reduce a :class:`RunRecord` to a :class:`PolicyResult`."""
    status = record.status
    served = (status == RequestStatus.COMPLETED) | (status == RequestStatus.UNFINISHED)
    arrival = record.arrival_s[served]
    end = record.end_s

    def waited(until: FloatArray) -> FloatArray:
        seconds: FloatArray = np.where(np.isnan(until[served]), end, until[served]) - arrival
        return seconds

    return PolicyResult(
        policy=policy,
        ttft=Percentiles.of(waited(record.first_token_s)),
        e2e=Percentiles.of(waited(record.finish_s)),
        queue=Percentiles.of(waited(record.scheduled_s)),
        throughput_tokens_per_s=_throughput(record, duration_s),
        imbalance=_imbalance(record),
        preemptions=record.preemptions,
        completed=int(np.sum(status == RequestStatus.COMPLETED)),
        rejected=int(np.sum(status == RequestStatus.REJECTED)),
        too_long=int(np.sum(status == RequestStatus.TOO_LONG)),
        unfinished=int(np.sum(status == RequestStatus.UNFINISHED)),
    )


def _throughput(record: RunRecord, duration_s: float) -> float:
    inside = record.sample_s <= duration_s + 1e-9
    if not np.any(inside) or record.sample_s[inside][-1] <= 0:
        return 0.0
    last = int(np.flatnonzero(inside)[-1])
    return float(record.generated_tokens[last] / record.sample_s[last])


def _imbalance(record: RunRecord) -> float:
    if record.kv_usage.size == 0:
        return 1.0
    mean = record.kv_usage.mean(axis=1)
    busy = mean > _BUSY_KV
    if not np.any(busy):
        return 1.0
    return float(np.mean(record.kv_usage[busy].max(axis=1) / mean[busy]))
