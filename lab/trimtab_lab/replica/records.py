"""Values the replica model hands out: per-request events, engine state and step reports.

They are what a caller learns from :class:`trimtab_lab.replica.model.Replica`: the simulator turns
events into latencies and states into engine metrics; the emulator streams the tokens a
:class:`StepReport` lists and serves :class:`ReplicaState` as Prometheus text.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["EventKind", "ReplicaState", "RequestEvent", "StepReport"]


class EventKind(enum.Enum):
    """What happened to a request in an iteration."""

    FIRST_TOKEN = enum.auto()
    """Its (first) prefill completed and the first output token was sampled."""
    FINISHED = enum.auto()
    """It emitted its last output token and left the batch."""
    PREEMPTED = enum.auto()
    """KV ran out: it went back to the head of the waiting queue, to be recomputed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestEvent:
    """One request's event, stamped with the end of the iteration it happened in."""

    kind: EventKind
    request_id: int
    time_s: float
    scheduled_s: float | None = None
    """FIRST_TOKEN only: start of the iteration that first scheduled the request."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaState:
    """A replica's engine metrics at ``time_s`` (what vLLM's ``/metrics`` would show)."""

    time_s: float
    running: int
    """Requests in the batch, prefilling or decoding (``vllm:num_requests_running``)."""
    waiting: int
    """Requests queued, including preempted ones (``vllm:num_requests_waiting``)."""
    kv_blocks_used: int
    kv_blocks_total: int
    waiting_tokens: int
    """Tokens the waiting requests will prefill when admitted."""
    preemptions_total: int
    """Counter (``vllm:num_preemptions_total``)."""
    generated_tokens_total: int
    """Counter of output tokens (``vllm:generation_tokens_total``)."""
    kv_blocks_cached: int = 0
    """Blocks of the prefix cache that no running request uses: held, but evictable at once.
    Not in ``kv_blocks_used``, as vLLM counts them free in ``kv_cache_usage_perc``."""
    prefix_queries_total: int = 0
    """Counter of prompt tokens looked up in the prefix cache when a request is scheduled
    (``vllm:prefix_cache_queries_total``); 0 while prefix caching is off."""
    prefix_hits_total: int = 0
    """Counter of those tokens found cached (``vllm:prefix_cache_hits_total``)."""

    @property
    def kv_usage(self) -> float:
        """KV-cache occupancy, 0..1 (``vllm:kv_cache_usage_perc``): blocks in use by requests."""
        return self.kv_blocks_used / self.kv_blocks_total


@dataclass(frozen=True, slots=True, kw_only=True)
class StepReport:
    """One iteration, as :meth:`trimtab_lab.replica.model.Replica.step` executed it."""

    start_s: float
    end_s: float
    """When the iteration's tokens become visible to clients."""
    emitted: tuple[int, ...]
    """Requests that got exactly one new output token in this iteration."""
    events: tuple[RequestEvent, ...]
