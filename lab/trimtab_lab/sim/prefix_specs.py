"""Scenario keys for prefix caching: the prefix workloads and the affinity balancers' knobs.

``workload.conversations`` and ``workload.shared_prefix`` describe the workloads of
:mod:`trimtab_lab.sim.workloads.prefixed`; ``affinity`` configures the ring-hash and
prefix-scorer balancers of :mod:`trimtab_lab.sim.prefix_balancers`. ``docs/simulator.md``
lists every key with its default. Lengths take the same ``{median, sigma, min, max}`` shape as
a mix's classes.
"""

from __future__ import annotations

import enum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from trimtab.api.durations import parse_duration
from trimtab_lab.sim.workloads.base import DEFAULT_BLOCK_TOKENS
from trimtab_lab.sim.workloads.mixes import Lengths
from trimtab_lab.sim.workloads.prefixed import Conversations, SharedPrefix

__all__ = [
    "AffinitySpec",
    "ConversationSpec",
    "HashKey",
    "ScorerSpec",
    "SharedPrefixSpec",
    "ThinkSpec",
]


def _seconds(value: object) -> object:
    return parse_duration(value) if isinstance(value, str) else value


_Duration = Annotated[float, BeforeValidator(_seconds), Strict(), Field(ge=0)]
_PositiveDuration = Annotated[float, BeforeValidator(_seconds), Strict(), Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Lengths(_Strict):
    median: float = Field(gt=0)
    sigma: float = Field(default=0.0, ge=0)
    min: int = Field(default=1, ge=1)
    max: int = Field(default=1_000_000, ge=1)

    def lengths(self) -> Lengths:
        return Lengths(median=self.median, sigma=self.sigma, minimum=self.min, maximum=self.max)


def _default(lengths: Lengths) -> _Lengths:
    return _Lengths(
        median=lengths.median, sigma=lengths.sigma, min=lengths.minimum, max=lengths.maximum
    )


_CONVERSATIONS = Conversations()
_SHARED = SharedPrefix()


class ThinkSpec(_Strict):
    median: _PositiveDuration = _CONVERSATIONS.think_median_s
    sigma: float = Field(default=_CONVERSATIONS.think_sigma, ge=0)


class ConversationSpec(_Strict):
    """Multi-turn chat sessions (:class:`~trimtab_lab.sim.workloads.prefixed.Conversations`)."""

    system_tokens: int = Field(default=_CONVERSATIONS.system_tokens, ge=0)
    first_user: _Lengths = _default(_CONVERSATIONS.first_user)
    user: _Lengths = _default(_CONVERSATIONS.user)
    output: _Lengths = _default(_CONVERSATIONS.output)
    turns: _Lengths = _default(_CONVERSATIONS.turns)
    think: ThinkSpec = Field(default_factory=ThinkSpec)
    nominal_tokens_per_s: float = Field(default=_CONVERSATIONS.nominal_tokens_per_s, gt=0)
    max_context: int = Field(default=_CONVERSATIONS.max_context, ge=1)
    block_tokens: int = Field(default=DEFAULT_BLOCK_TOKENS, ge=1)
    warmup: _Duration = _CONVERSATIONS.warmup_s

    def build(self) -> Conversations:
        return Conversations(
            system_tokens=self.system_tokens,
            first_user=self.first_user.lengths(),
            user=self.user.lengths(),
            output=self.output.lengths(),
            turns=self.turns.lengths(),
            think_median_s=self.think.median,
            think_sigma=self.think.sigma,
            nominal_tokens_per_s=self.nominal_tokens_per_s,
            max_context=self.max_context,
            block_tokens=self.block_tokens,
            warmup_s=self.warmup,
        )


class SharedPrefixSpec(_Strict):
    """One hot prefix (:class:`~trimtab_lab.sim.workloads.prefixed.SharedPrefix`)."""

    prefix_tokens: int = Field(default=_SHARED.prefix_tokens, ge=0)
    share: float = Field(default=_SHARED.share, ge=0, le=1)
    suffix: _Lengths = _default(_SHARED.suffix)
    output: _Lengths = _default(_SHARED.output)
    block_tokens: int = Field(default=DEFAULT_BLOCK_TOKENS, ge=1)

    def build(self) -> SharedPrefix:
        return SharedPrefix(
            prefix_tokens=self.prefix_tokens,
            share=self.share,
            suffix=self.suffix.lengths(),
            output=self.output.lengths(),
            block_tokens=self.block_tokens,
        )


class HashKey(enum.StrEnum):
    """What ring hash hashes (what a gateway would put in the hashed header)."""

    SESSION = "session"
    """The session id; requests without one fall back to their prefix."""
    PREFIX = "prefix"
    """The first ``key_blocks`` block hashes of the prompt."""


class ScorerSpec(_Strict):
    """The llm-d-like prefix scorer's weights (llm-d's defaults) and metrics age."""

    prefix_weight: float = Field(default=3.0, ge=0)
    queue_weight: float = Field(default=2.0, ge=0)
    kv_weight: float = Field(default=2.0, ge=0)
    refresh: _PositiveDuration = 0.05


class AffinitySpec(_Strict):
    """Knobs of ``ring_hash``, ``trimtab_ring`` and ``prefix_scorer``."""

    hash_key: HashKey = HashKey.SESSION
    key_blocks: int = Field(default=2, ge=1)
    hash_balance_factor: int | None = Field(default=150, ge=100)
    """Envoy's bounded load, in percent of the mean; ``null`` for plain consistent hashing."""
    ring_size: int = Field(default=1024, ge=1, le=8_388_608)
    """Envoy's ``minimum_ring_size`` (default 1024)."""
    scorer: ScorerSpec = Field(default_factory=ScorerSpec)
