"""What goes into admission and what comes out: frozen values, validated on construction.

A field out of range raises :class:`trimtab.errors.SpecInvalid` naming it, so a broken header or
metric is refused where the value is built, never deep inside the queue.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NewType

from trimtab.api.records import PodName
from trimtab.errors import SpecInvalid

__all__ = [
    "AdmissionStats",
    "Ask",
    "Grant",
    "PickReason",
    "PodCapacity",
    "PodStats",
    "Queued",
    "Refusal",
    "RefusalReason",
    "RequestId",
]

RequestId = NewType("RequestId", str)


class RefusalReason(enum.Enum):
    """Why a request got no pod."""

    NO_ENDPOINT = enum.auto()
    """No pod at all, or none in the subset hint: HTTP 503."""
    QUEUE_FULL = enum.auto()
    """The shared queue holds ``queue_length`` requests already: HTTP 429."""
    QUEUE_TIMEOUT = enum.auto()
    """Waited ``queue_ttl_s``: HTTP 429."""
    TOO_LARGE = enum.auto()
    """The prompt alone exceeds the whole KV cache of every candidate pod, so no wait can help:
    HTTP 429 without Retry-After (413 is not in the EPP protocol)."""


class PickReason(enum.Enum):
    """Why a granted request went to its pod (counted per grant, logged by the picker)."""

    NORMAL = enum.auto()
    """Affinity off, or the request carried no prefix and no session."""
    MISS = enum.auto()
    """No admissible pod is believed to hold any of the prefix or the session."""
    HIT = enum.auto()
    """Sent to the admissible pod expected to skip the most prefill, within the load bound."""
    LOAD_GUARD = enum.auto()
    """The pod holding the most of the prefix was beyond the load bound: one holding less, or
    the normal pick, won."""
    NO_ROOM = enum.auto()
    """The pods holding the prefix had no room for it (cap, KV or draining): the normal pick."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True, kw_only=True)
class PodCapacity:
    """What admission knows of one pod, refreshed on every decision or metrics tick."""

    name: PodName
    """The pod's name: in-flight counts follow it across :meth:`Admission.set_pods` calls."""
    address: str
    """``ip:port`` as the gateway should dial it (what the subset hint and grants name)."""
    cap: int
    """Most requests in flight at once (the policy's decision); 0 takes no new work."""
    accepting: bool = True
    """False while the pod drains or preempts: no new work until it recovers."""
    speed: float = 1.0
    """Relative decode speed, > 0: pods are chosen by in-flight per unit of speed."""
    kv_usage: float | None = None
    """Last KV-cache snapshot as a fraction (values above 1 mean full); None when unknown."""
    kv_observed_at: float | None = None
    """When that snapshot was taken, on the ``now`` clock; None when unknown."""
    kv_capacity_tokens: int | None = None
    """KV-cache size in tokens (``num_gpu_blocks * block_size``); None turns the pod's KV
    budget off (count-based admission only)."""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.name, str) or not self.name:
            problems.append(f"name must be a non-empty string, got {self.name!r}")
        if not isinstance(self.address, str) or not self.address:
            problems.append(f"address must be a non-empty string, got {self.address!r}")
        if not _is_int(self.cap) or self.cap < 0:
            problems.append(f"cap must be an integer >= 0, got {self.cap!r}")
        if not isinstance(self.accepting, bool):
            problems.append(f"accepting must be a bool, got {self.accepting!r}")
        if not _is_real(self.speed) or self.speed <= 0:
            problems.append(f"speed must be a finite number > 0, got {self.speed!r}")
        if self.kv_usage is not None and (not _is_real(self.kv_usage) or self.kv_usage < 0):
            problems.append(f"kv_usage must be None or a finite number >= 0, got {self.kv_usage!r}")
        if self.kv_observed_at is not None and not _is_real(self.kv_observed_at):
            problems.append(f"kv_observed_at must be None or finite, got {self.kv_observed_at!r}")
        if self.kv_capacity_tokens is not None and (
            not _is_int(self.kv_capacity_tokens) or self.kv_capacity_tokens <= 0
        ):
            problems.append(
                f"kv_capacity_tokens must be None or an integer > 0, "
                f"got {self.kv_capacity_tokens!r}"
            )
        if problems:
            raise SpecInvalid([f"pod {self.name!r}: {problem}" for problem in problems])


@dataclass(frozen=True, kw_only=True)
class Ask:
    """One request asking for a pod."""

    id: RequestId
    """Unique while the request lives (asking twice with one id returns the first answer)."""
    prompt_tokens: int
    """Prompt size in tokens (from a token-count header or the body size), >= 0."""
    priority: int = 0
    """Priority class, 0 first; numbers past the last class join the last class."""
    subset: frozenset[str] | None = None
    """Allowed ``ip:port`` addresses (the EPP subset hint); None allows every pod."""
    prefix: tuple[int, ...] = ()
    """Chained block hashes of the prompt's leading full blocks
    (:func:`trimtab.admission.prefix.prompt_block_hashes`), for prefix affinity."""
    session: str | None = None
    """A conversation key (the ``x-session-id`` header), for affinity without a body."""

    def __post_init__(self) -> None:
        problems = []
        if not isinstance(self.id, str):
            problems.append(f"id must be a string, got {self.id!r}")
        if not _is_int(self.prompt_tokens) or self.prompt_tokens < 0:
            problems.append(f"prompt_tokens must be an integer >= 0, got {self.prompt_tokens!r}")
        if not _is_int(self.priority) or self.priority < 0:
            problems.append(f"priority must be an integer >= 0, got {self.priority!r}")
        if self.subset is not None and (
            not isinstance(self.subset, frozenset)
            or not all(isinstance(address, str) for address in self.subset)
        ):
            problems.append(f"subset must be None or a frozenset of strings, got {self.subset!r}")
        if not isinstance(self.prefix, tuple) or not all(_is_int(h) for h in self.prefix):
            problems.append(f"prefix must be a tuple of integers, got {self.prefix!r}")
        if self.session is not None and not isinstance(self.session, str):
            problems.append(f"session must be None or a string, got {self.session!r}")
        if problems:
            raise SpecInvalid([f"ask {self.id!r}: {problem}" for problem in problems])


@dataclass(frozen=True, kw_only=True)
class Grant:
    """The request may go to ``address`` now; its slot is held until :meth:`Admission.release`."""

    id: RequestId
    pod: PodName
    address: str
    fallbacks: tuple[str, ...]
    """Other admissible addresses with room, best first (the EPP fallback list); may be empty."""
    reason: PickReason = PickReason.NORMAL
    hit_tokens: int = 0
    """Prompt tokens the pod is expected to hold already (0 unless ``reason`` is HIT)."""


@dataclass(frozen=True, kw_only=True)
class Queued:
    """The request waits in the shared queue; a later call returns its Grant or Refusal."""

    id: RequestId
    position: int
    """Requests ahead of it when it was queued (0: it is next)."""


@dataclass(frozen=True, kw_only=True)
class Refusal:
    """The request gets no pod."""

    id: RequestId
    reason: RefusalReason
    status: int
    """HTTP status for the client: 503 (no endpoint) or 429."""
    retry_after_s: float | None
    """Retry-After for a 429 the client may retry; None otherwise."""


@dataclass(frozen=True, kw_only=True)
class PodStats:
    """One pod as admission sees it."""

    name: PodName
    address: str
    in_flight: int
    cap: int
    accepting: bool
    kv_estimate: float | None
    """Estimated KV use (fraction) from the last snapshot and the tokens granted and released
    since; None when the snapshot or the KV size is unknown. Whether the snapshot is still
    fresh is not judged here (``kv_observed_at``)."""
    kv_observed_at: float | None


@dataclass(frozen=True, kw_only=True)
class AdmissionStats:
    """Counters since construction, plus the current per-pod and queue state.

    They add up: ``asked == granted + refused_total + withdrawn + queue_length`` and
    ``granted == released + forgotten + sum(pod.in_flight)``.
    """

    pods: tuple[PodStats, ...]
    queue_length: int
    queued_by_priority: tuple[int, ...]
    """Requests waiting, per priority class."""
    asked: int
    """Distinct asks (a repeated id is not counted again)."""
    granted: int
    """Grants, immediate or from the queue."""
    queued: int
    """Asks that had to wait (whatever became of them)."""
    refused: Mapping[RefusalReason, int]
    """Refusals per reason, immediate or from the queue (every reason present, maybe 0)."""
    withdrawn: int
    """Queued requests that went away (:meth:`Admission.withdraw`, or a release while queued)."""
    released: int
    """Slots given back by :meth:`Admission.release`."""
    forgotten: int
    """Slots dropped because their pod left the pod set."""
    picks: Mapping[PickReason, int] = field(default_factory=dict)
    """Grants per reason (every reason present, maybe 0, when built by :class:`Admission`)."""
    hit_tokens: int = 0
    """Prompt tokens of granted requests expected cached on their pod (sum of ``hit_tokens``)."""

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())
