"""The workload value: one request per index, arrival times sorted from zero.

Readers (``traces``), generators (``mixes``) and transforms (``shaping``) all produce a
:class:`Workload`; the engine replays it identically for every balancer (common random numbers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["DEFAULT_BLOCK_TOKENS", "FloatArray", "IntArray", "Workload"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_BLOCK_TOKENS = 512
"""The Mooncake trace's hash block; the synthetic prefix workloads use it too."""


@dataclass(frozen=True, eq=False, kw_only=True)
class Workload:
    """Requests as parallel arrays; index ``i`` is request id ``i`` in the simulation."""

    arrival_s: FloatArray
    """Arrival times in seconds, non-decreasing, the first at or after 0."""
    prompt_tokens: IntArray
    """Prompt length of each request, >= 1."""
    output_tokens: IntArray
    """Output length of each request, >= 1."""
    source: str
    """Where it came from, for reports (e.g. ``"azure-llm-2023-conv.csv x3.1"``)."""
    block_hashes: tuple[tuple[int, ...], ...] | None = None
    """Per request, one chained hash per ``prefix_block_tokens`` of its prompt (equal hashes
    mean equal prefixes); ``None`` when the workload says nothing about shared prefixes."""
    sessions: IntArray | None = None
    """Per request, the conversation it belongs to (a session header), -1 for none."""
    prefix_block_tokens: int = DEFAULT_BLOCK_TOKENS
    """Tokens per hashed block (the Mooncake trace's ``hash_ids`` cover 512 each)."""

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("arrival_s, prompt_tokens and output_tokens differ in length")
        if self.block_hashes is not None and len(self.block_hashes) != n:
            raise ValueError("block_hashes must have one entry per request")
        if self.sessions is not None and len(self.sessions) != n:
            raise ValueError("sessions must have one entry per request")
        if self.prefix_block_tokens < 1:
            raise ValueError("prefix_block_tokens must be >= 1")
        if n and (np.any(np.diff(self.arrival_s) < 0) or self.arrival_s[0] < 0):
            raise ValueError("arrival_s must be non-negative and sorted")
        if n and (self.prompt_tokens.min() < 1 or self.output_tokens.min() < 1):
            raise ValueError("prompt_tokens and output_tokens must be >= 1")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def hashes_of(self, request: int) -> tuple[int, ...]:
        """The block hashes of ``request`` (empty without prefix information)."""
        return self.block_hashes[request] if self.block_hashes is not None else ()

    def session_of(self, request: int) -> int:
        """The session of ``request``, -1 when it has none."""
        return int(self.sessions[request]) if self.sessions is not None else -1

    @property
    def span_s(self) -> float:
        """Time from zero to the last arrival."""
        return float(self.arrival_s[-1]) if len(self) else 0.0
