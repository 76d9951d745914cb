"""Admission's knobs: one frozen dataclass, validated on construction.

A value outside its range raises :class:`trimtab.errors.SpecInvalid` naming the field, so a bad
``spec.admission`` fails at the edge, like the rest of the spec, instead of queueing oddly.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields

from trimtab.errors import SpecInvalid

__all__ = ["AdmissionSettings", "AffinityMode"]


class AffinityMode(enum.Enum):
    """Whether admission prefers pods believed to hold a request's prompt prefix."""

    OFF = "off"
    PREFIX = "prefix"
    """Among the pods that may take a request now, prefer the one expected to skip the most
    prefill (prefix blocks or session last sent there), under the load guard."""


# (low, high, low_inclusive, high_inclusive) per field, next to the dataclass so the docstrings
# and the checks cannot drift far apart.
_RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "queue_length": (0, 10_000_000, True, True),
    "queue_ttl_s": (0.0, 86_400.0, False, True),
    "kv_limit": (0.0, 1.0, False, True),
    "expected_output_tokens": (0, 10_000_000, True, True),
    "bytes_per_token": (0.0, 1_000_000.0, False, True),
    "stale_after_s": (0.0, 3600.0, False, True),
    "priority_classes": (1, 64, True, True),
    "retry_after_s": (0.0, 86_400.0, True, True),
    "max_fallbacks": (0, 16, True, True),
    "affinity_block_tokens": (1, 1_000_000, True, True),
    "affinity_max_prefix_bytes": (0, 16 * 1024 * 1024, True, True),
    "affinity_load_factor": (1.0, 100.0, True, True),
}


@dataclass(frozen=True, kw_only=True)
class AdmissionSettings:
    """Tuning of :class:`trimtab.admission.Admission`."""

    queue_length: int = 1024
    """Most requests waiting in the one shared queue; beyond it an ask is refused (429). 0 turns
    queueing off. 0..10,000,000. Default 1024."""

    queue_ttl_s: float = 30.0
    """A request that has waited this many seconds is shed (429 with Retry-After).
    (0, 86400]. Default 30."""

    kv_limit: float = 0.90
    """Admit to a pod only while its estimated KV-cache use, this request included, stays below
    this fraction (``1 - watermark - margin``). (0, 1]. Default 0.9."""

    expected_output_tokens: int = 256
    """Output tokens assumed per request when estimating its KV footprint. 0..10,000,000.
    Default 256."""

    bytes_per_token: float = 4.0
    """Request-body bytes per prompt token, to estimate a prompt's size from ``content-length``
    when no token-count header came (see :meth:`estimate_prompt_tokens`). (0, 1e6]. Default 4."""

    stale_after_s: float = 15.0
    """A KV snapshot older than this is ignored: the pod is admitted by count alone with its cap
    (fail open, never "stale = saturated"). (0, 3600]. Default 15."""

    priority_classes: int = 1
    """Priorities ``0..priority_classes-1``, 0 served first, FIFO inside a class; an ask with a
    higher number joins the last class. 1..64. Default 1."""

    retry_after_s: float = 1.0
    """Retry-After, seconds, sent with a 429 for a full queue or a timed-out wait. 0..86400.
    Default 1."""

    max_fallbacks: int = 3
    """Most fallback addresses per grant (the EPP fallback list). 0..16. Default 3."""

    affinity: AffinityMode = AffinityMode.OFF
    """Prefix affinity (:mod:`trimtab.admission.affinity`). Default off."""

    affinity_block_tokens: int = 512
    """Tokens per hashed prefix block. A router's block, not the engine's: a match of ``k``
    blocks means ``k * affinity_block_tokens`` identical leading tokens, which the engine
    caches in its own smaller blocks (vLLM's 16), so keep it a multiple of those. Coarser
    blocks hash less and index less; a prefix shorter than one block is never matched.
    1..1,000,000. Default 512 (Mooncake's ``hash_ids`` granularity)."""

    affinity_max_prefix_bytes: int = 65536
    """Most request-body bytes the picker reads and hashes for a prefix. 0..16 MiB.
    Default 64 KiB (about 16k tokens at 4 bytes a token)."""

    affinity_load_factor: float = 1.25
    """A pod holding the prefix wins only while, with the request, its in-flight count per
    unit of speed stays within this factor of the least-loaded admissible pod's (with that
    pod's request counted; rounded up to whole requests, as consistent hashing with bounded
    loads does). [1, 100]. Default 1.25."""

    def __post_init__(self) -> None:
        problems = [
            problem
            for spec in fields(self)
            if spec.name in _RANGES
            and (
                problem := _check(
                    name=spec.name, value=getattr(self, spec.name), integral=spec.type == "int"
                )
            )
        ]
        if not isinstance(self.affinity, AffinityMode):
            problems.append(f"affinity must be an AffinityMode, got {self.affinity!r}")
        if problems:
            raise SpecInvalid(problems)

    def estimate_prompt_tokens(self, *, content_length: int) -> int:
        """Prompt tokens guessed from a request body's size in bytes (never below 0)."""
        return math.ceil(max(0, content_length) / self.bytes_per_token)


def _check(*, name: str, value: object, integral: bool) -> str | None:
    # bool is an int subclass; ``True`` as a queue length is a spec mistake.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{name} must be a number, got {value!r}"
    if integral and not isinstance(value, int):
        return f"{name} must be an integer, got {value!r}"
    low, high, low_inclusive, high_inclusive = _RANGES[name]
    above = value >= low if low_inclusive else value > low
    below = value <= high if high_inclusive else value < high
    if math.isnan(value) or not (above and below):
        left = "[" if low_inclusive else "("
        right = "]" if high_inclusive else ")"
        return f"{name} must be in {left}{low}, {high}{right}, got {value!r}"
    return None
