"""Statistics of one simulated run: latency percentiles, throughput, imbalance, rejections.

Latencies are in seconds. TTFT runs from arrival to the first token, end-to-end to the last,
queue time to the start of the iteration that first scheduled the request (proxy, shared queue
and engine queue together). TPOT, the time per output token, is ``(e2e - ttft) / (output - 1)``
for requests of two or more output tokens. A request still in flight when the run stops counts
with the time it had waited so far (a lower bound), so a balancer cannot look better by never
finishing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trimtab_lab.sim.engine import RequestStatus, RunRecord
from trimtab_lab.sim.workloads.base import FloatArray
from trimtab_lab.stats import Percentiles, finite, imbalance

__all__ = ["PolicyResult", "summarise", "time_per_output_token"]


@dataclass(frozen=True, kw_only=True)
class PolicyResult:
    """One balancer's outcome on a scenario."""

    policy: str
    ttft: Percentiles
    e2e: Percentiles
    queue: Percentiles
    tpot: Percentiles
    """Seconds per output token after the first, over requests of two or more output tokens."""
    throughput_tokens_per_s: float
    """Output tokens generated fleet-wide per second over the arrival window."""
    imbalance: float
    """Time average of max/mean KV usage across replicas (1 = perfectly even)."""
    preemptions: int
    completed: int
    rejected: int
    """Refused requests: Envoy's pending-queue overflow (503), the picker's 429s and 503s."""
    too_long: int
    unfinished: int
    goodput_multiplier: float | None = None
    """Largest arrival-rate multiplier keeping p99 TTFT and p99 TPOT under the SLO, when
    searched."""
    goodput_rate_per_s: float | None = None
    """That multiplier times the scenario's offered request rate."""
    prefix_hit_rate: float | None = None
    """Share of prompt tokens looked up in the prefix caches that were found cached; ``None``
    while prefix caching is off."""

    def to_json(self) -> dict[str, float | int | str | None]:
        """Flat JSON object: ``ttft_p99``, ``e2e_p50``, ``queue_p99``, ... (seconds)."""
        flat: dict[str, float | int | str | None] = {}
        for key, value in vars(self).items():
            if isinstance(value, Percentiles):
                flat.update(value.flat(key))
            else:
                flat[key] = finite(value) if isinstance(value, float) else value
        return flat


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
        tpot=Percentiles.of(time_per_output_token(record)),
        throughput_tokens_per_s=_throughput(record, duration_s),
        imbalance=imbalance(record.kv_usage),
        preemptions=record.preemptions,
        completed=int(np.sum(status == RequestStatus.COMPLETED)),
        rejected=int(np.sum(status == RequestStatus.REJECTED)),
        too_long=int(np.sum(status == RequestStatus.TOO_LONG)),
        unfinished=int(np.sum(status == RequestStatus.UNFINISHED)),
        prefix_hit_rate=(
            record.prefix_hits / record.prefix_queries if record.prefix_queries else None
        ),
    )


def time_per_output_token(record: RunRecord) -> FloatArray:
    """``(e2e - ttft) / (output - 1)`` of each served request with two or more output tokens
    and a first token; one still decoding when the run stopped counts up to the stop."""
    status = record.status
    served = (status == RequestStatus.COMPLETED) | (status == RequestStatus.UNFINISHED)
    chosen = served & (record.output_tokens >= 2) & ~np.isnan(record.first_token_s)
    last = np.where(np.isnan(record.finish_s[chosen]), record.end_s, record.finish_s[chosen])
    seconds: FloatArray = (last - record.first_token_s[chosen]) / (record.output_tokens[chosen] - 1)
    return seconds


def _throughput(record: RunRecord, duration_s: float) -> float:
    inside = record.sample_s <= duration_s + 1e-9
    if not np.any(inside) or record.sample_s[inside][-1] <= 0:
        return 0.0
    last = int(np.flatnonzero(inside)[-1])
    return float(record.generated_tokens[last] / record.sample_s[last])
