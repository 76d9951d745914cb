"""Internal records passed between the layers: what was observed and what was decided.

These frozen dataclasses are the contract between ``metrics`` (which produces
:class:`PodSample`), ``policy`` (which turns :class:`PodInput` into a :class:`Decision`) and
``targets`` / the status writer (which consume a :class:`Decision`). They hold plain numbers and
strings only, so the same policy code runs in the operator and in the fleet simulator.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import NewType

__all__ = [
    "Decision",
    "Endpoint",
    "PodDecision",
    "PodInput",
    "PodName",
    "PodSample",
    "PodState",
    "PoolKey",
]

PodName = NewType("PodName", str)


class PodState(enum.StrEnum):
    """How the policy treats one pod in a decision."""

    SERVING = "Serving"
    """Normal member: weight follows its headroom."""
    WARMING = "Warming"
    """Recently ready: weight ramps up over ``slowStart``."""
    DRAINING = "Draining"
    """Preempting or saturated: weight held at the floor until it recovers."""
    STALE = "Stale"
    """Metrics missing or older than ``staleAfter``: weight decays towards equal."""
    UNREACHABLE = "Unreachable"
    """Its metrics port refused or timed out: weight at the floor (never zero) until it
    answers again, then back up by the normal smoothing."""


@dataclass(frozen=True)
class Endpoint:
    """Where a pool member receives traffic."""

    name: PodName
    """Pod name, or the static endpoint's name."""
    address: str
    """IPv4/IPv6 address or hostname."""
    port: int
    """Serving port (1..65535)."""

    @property
    def host_port(self) -> str:
        """``ip:port`` as a gateway dials it (``[v6]:port`` for IPv6), the EPP's address form."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


@dataclass(frozen=True)
class PodSample:
    """One pod's load as read from its engine's metrics. ``None`` means the series was missing."""

    running: float | None = None
    """Requests in the running batch (e.g. ``vllm:num_requests_running``)."""
    waiting: float | None = None
    """Requests queued inside the engine (e.g. ``vllm:num_requests_waiting``)."""
    kv_usage: float | None = None
    """KV-cache occupancy as a fraction, 0..1."""
    preemption_rate: float | None = None
    """Preemptions per second over the last window (rate of a counter)."""
    age_s: float | None = None
    """Seconds between the sample being taken and the decision; ``None`` when unknown."""
    decode_tokens_per_s: float | None = None
    """Output tokens the pod generated per second over the last window (rate of a counter such
    as ``vllm:generation_tokens_total``)."""
    prefix_hit_rate: float | None = None
    """Share of prompt tokens served from the prefix cache over the last window, 0..1 (hits
    over queries, e.g. ``vllm:prefix_cache_hits_total``); ``None`` when the engine exports no
    such counters or no prompt arrived in the window."""
    kv_capacity_tokens: int | None = None
    """The KV cache's size in tokens (vLLM ``cache_config_info`` blocks × block size, TGI's
    ``tgi_batch_max_total_tokens``); ``None`` when the engine does not say."""
    unreachable: bool = False
    """The pod itself did not answer (connection refused, reset or timed out), as opposed to
    answering with a bad page: a dead replica must not keep its weight."""
    problem: str | None = None
    """Why the pod's page could not be used although it answered (too large, too slow, an
    HTTP error); the pod is then Stale with this as its reason."""


@dataclass(frozen=True)
class PodInput:
    """Everything the policy knows about one Ready member at decision time."""

    name: PodName
    ready_for_s: float
    """Seconds since the pod became Ready (drives slow start); ``inf`` for static endpoints."""
    sample: PodSample | None = None
    """Latest metrics, or ``None`` when none were ever read."""


@dataclass(frozen=True)
class PodDecision:
    """What the policy decided for one pod."""

    name: PodName
    weight: int
    """Envoy load-balancing weight, >= 1 for every Ready pod."""
    max_in_flight: int
    """Per-pod in-flight cap (Envoy ``per_host_thresholds.max_connections``), >= 1."""
    state: PodState
    reason: str
    """Short human-readable explanation, e.g. ``"kv 0.93 > 0.90"``."""


@dataclass(frozen=True)
class Decision:
    """A whole pool's weights and caps. Never empty of weight: at least one pod has weight > 0."""

    pods: tuple[PodDecision, ...] = field(default_factory=tuple)

    def by_name(self) -> dict[PodName, PodDecision]:
        return {pod.name: pod for pod in self.pods}


@dataclass(frozen=True)
class PoolKey:
    """Identifies a pool: ``namespace/name`` (local mode uses the namespace from its file)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
