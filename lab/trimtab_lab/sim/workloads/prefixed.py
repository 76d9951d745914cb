"""Workloads whose prompts share prefixes: multi-turn conversations and a hot system prompt.

Both carry block hashes (one per ``block_tokens`` of each prompt, equal hashes meaning equal
prefixes, as in the Mooncake trace's ``hash_ids``) so that replicas with prefix caching and
prefix-aware balancers see the sharing.

**Conversations.** Sessions start as a gamma renewal process (coefficient of variation ``cv``).
Turn 1's prompt is a system prompt shared by every session plus a first user message; turn
``k+1``'s prompt is turn ``k``'s prompt, its reply and a new user message, so the context grows
and every turn's prompt extends the previous one's. Turn ``k+1`` arrives after turn ``k`` plus
the reply's nominal streaming time (``output / nominal_tokens_per_s``) plus a think time; this
keeps arrivals identical for every balancer (an open loop: a slow reply does not delay the next
turn). A session ends after its drawn number of turns or when the context would pass
``max_context``. Sessions also start in the ``warmup`` before time 0 (their requests before 0
are dropped), so the run begins with conversations already under way. Each request carries its
session id.

**Shared prefix.** A ``share`` of the requests start with one hot prefix of ``prefix_tokens``
(a long system prompt) followed by a unique suffix; the rest have a unique prompt of the same
length distribution. Gamma arrivals at the given rate. No session ids.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trimtab_lab.sim.workloads.base import DEFAULT_BLOCK_TOKENS, IntArray, Workload
from trimtab_lab.sim.workloads.mixes import Lengths, draw_lengths

__all__ = [
    "Conversations",
    "SharedPrefix",
    "conversation_sizes",
    "generate_conversations",
    "generate_shared_prefix",
    "shared_prefix_sizes",
]

_SHARED = 0
"""Namespace of blocks every request may share (the system prompt); sessions count from 1."""
_INDEX_BITS = 24

_FIRST_USER = Lengths(median=600, sigma=0.8, maximum=8000)
_USER = Lengths(median=150, sigma=0.8, maximum=4000)
_REPLY = Lengths(median=250, sigma=0.6, maximum=2000)
_TURNS = Lengths(median=5, sigma=0.6, maximum=40)
_SUFFIX = Lengths(median=300, sigma=0.8, maximum=8000)
_ANSWER = Lengths(median=200, sigma=0.8, maximum=2000)


def _block_id(namespace: int, index: int) -> int:
    # Blocks are named by (owner, position): a session's block k is the same block in every
    # turn, because its context only grows by appending.
    return (namespace << _INDEX_BITS) | index


def _hashes(
    *, prompt: int, shared_tokens: int, namespace: int, block_tokens: int
) -> tuple[int, ...]:
    """Hashes of a prompt's blocks: those wholly inside the shared prefix are shared."""
    blocks = -(-prompt // block_tokens)
    shared_blocks = shared_tokens // block_tokens
    return tuple(
        _block_id(_SHARED if index < shared_blocks else namespace, index) for index in range(blocks)
    )


@dataclass(frozen=True, kw_only=True)
class Conversations:
    """A mix of multi-turn chat sessions (see the module docstring)."""

    system_tokens: int = 1024
    """System prompt at the start of every session, shared by all of them."""
    first_user: Lengths = _FIRST_USER
    user: Lengths = _USER
    output: Lengths = _REPLY
    turns: Lengths = _TURNS
    think_median_s: float = 20.0
    think_sigma: float = 0.8
    nominal_tokens_per_s: float = 50.0
    """Streaming speed assumed for when a reply ends (20 ms per token)."""
    max_context: int = 32_000
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    warmup_s: float = 600.0

    def __post_init__(self) -> None:
        if self.system_tokens < 0 or self.max_context < 1 or self.block_tokens < 1:
            raise ValueError("need system_tokens >= 0, max_context >= 1 and block_tokens >= 1")
        if not (self.think_median_s > 0 and self.think_sigma >= 0):
            raise ValueError("need think_median_s > 0 and think_sigma >= 0")
        if not self.nominal_tokens_per_s > 0 or self.warmup_s < 0:
            raise ValueError("need nominal_tokens_per_s > 0 and warmup_s >= 0")
        if self.system_tokens + self.first_user.minimum + self.output.minimum > self.max_context:
            raise ValueError("max_context leaves no room for a first turn")


@dataclass(frozen=True, kw_only=True)
class _Session:
    offsets_s: list[float]
    prompts: list[int]
    outputs: list[int]


def _draw_session(spec: Conversations, rng: np.random.Generator) -> _Session:
    turns = int(draw_lengths(lengths=spec.turns, count=1, rng=rng)[0])
    users = draw_lengths(lengths=spec.user, count=turns, rng=rng)
    outputs = draw_lengths(lengths=spec.output, count=turns, rng=rng)
    thinks = spec.think_median_s * np.exp(spec.think_sigma * rng.standard_normal(turns))
    first = int(draw_lengths(lengths=spec.first_user, count=1, rng=rng)[0])
    session = _Session(offsets_s=[], prompts=[], outputs=[])
    prompt, offset = spec.system_tokens + first, 0.0
    for turn in range(turns):
        output = int(outputs[turn])
        if prompt + output > spec.max_context:
            break
        session.offsets_s.append(offset)
        session.prompts.append(prompt)
        session.outputs.append(output)
        offset += output / spec.nominal_tokens_per_s + float(thinks[turn])
        prompt += output + int(users[turn])
    return session


def conversation_sizes(
    *, spec: Conversations, sessions: int, seed: int
) -> tuple[IntArray, IntArray, float]:
    """Prompt and output lengths of the requests of ``sessions`` sessions, and turns per session."""
    rng = np.random.default_rng(seed)
    drawn = [_draw_session(spec, rng) for _ in range(sessions)]
    prompts = np.array([p for s in drawn for p in s.prompts], dtype=np.int64)
    outputs = np.array([o for s in drawn for o in s.outputs], dtype=np.int64)
    return prompts, outputs, len(prompts) / max(sessions, 1)


def _gamma_starts(
    *, rate_per_s: float, start_s: float, end_s: float, cv: float, rng: np.random.Generator
) -> np.ndarray:
    shape = 1.0 / (cv * cv)
    starts: list[float] = []
    now = start_s
    batch = int(rate_per_s * (end_s - start_s) * 1.1) + 64
    while now < end_s:
        gaps = rng.gamma(shape, 1.0 / (shape * rate_per_s), size=batch)
        times = now + np.cumsum(gaps)
        starts.extend(times[times < end_s].tolist())
        now = float(times[-1])
    return np.array(starts, dtype=np.float64)


def generate_conversations(
    *, spec: Conversations, sessions_per_s: float, duration_s: float, cv: float, seed: int
) -> Workload:
    """Requests of sessions starting at ``sessions_per_s`` over ``[-warmup, duration)``."""
    if not sessions_per_s > 0 or not duration_s > 0 or not cv > 0:
        raise ValueError("sessions_per_s, duration_s and cv must be > 0")
    rng = np.random.default_rng(seed)
    starts = _gamma_starts(
        rate_per_s=sessions_per_s, start_s=-spec.warmup_s, end_s=duration_s, cv=cv, rng=rng
    )
    rows: list[tuple[float, int, int, int]] = []
    for number, start in enumerate(starts.tolist()):
        session = _draw_session(spec, rng)
        for offset, prompt, output in zip(
            session.offsets_s, session.prompts, session.outputs, strict=True
        ):
            at = start + offset
            if 0.0 <= at < duration_s:
                rows.append((at, prompt, output, number))
    rows.sort()
    ids = np.array([r[3] for r in rows], dtype=np.int64)
    return Workload(
        arrival_s=np.array([r[0] for r in rows], dtype=np.float64),
        prompt_tokens=np.array([r[1] for r in rows], dtype=np.int64),
        output_tokens=np.array([r[2] for r in rows], dtype=np.int64),
        source=f"conversations at {sessions_per_s:.3g} sessions/s cv {cv:g}",
        block_hashes=tuple(
            _hashes(
                prompt=r[1],
                shared_tokens=spec.system_tokens,
                namespace=r[3] + 1,
                block_tokens=spec.block_tokens,
            )
            for r in rows
        ),
        sessions=ids,
        prefix_block_tokens=spec.block_tokens,
    )


@dataclass(frozen=True, kw_only=True)
class SharedPrefix:
    """Most requests share one long prefix (see the module docstring)."""

    prefix_tokens: int = 4096
    share: float = 0.9
    suffix: Lengths = _SUFFIX
    output: Lengths = _ANSWER
    block_tokens: int = DEFAULT_BLOCK_TOKENS

    def __post_init__(self) -> None:
        if self.prefix_tokens < 0 or not 0.0 <= self.share <= 1.0 or self.block_tokens < 1:
            raise ValueError("need prefix_tokens >= 0, 0 <= share <= 1 and block_tokens >= 1")


def shared_prefix_sizes(*, spec: SharedPrefix, count: int, seed: int) -> tuple[IntArray, IntArray]:
    """Prompt and output lengths of ``count`` requests of the mix."""
    rng = np.random.default_rng(seed)
    prompts = spec.prefix_tokens + draw_lengths(lengths=spec.suffix, count=count, rng=rng)
    return prompts, draw_lengths(lengths=spec.output, count=count, rng=rng)


def generate_shared_prefix(
    *, spec: SharedPrefix, rate_per_s: float, duration_s: float, cv: float, seed: int
) -> Workload:
    """Requests of the mix arriving at ``rate_per_s`` over ``[0, duration_s)``."""
    if not rate_per_s > 0 or not duration_s > 0 or not cv > 0:
        raise ValueError("rate_per_s, duration_s and cv must be > 0")
    rng = np.random.default_rng(seed)
    arrival = _gamma_starts(rate_per_s=rate_per_s, start_s=0.0, end_s=duration_s, cv=cv, rng=rng)
    count = len(arrival)
    prompts = spec.prefix_tokens + draw_lengths(lengths=spec.suffix, count=count, rng=rng)
    outputs = draw_lengths(lengths=spec.output, count=count, rng=rng)
    sharing = rng.random(count) < spec.share
    hashes = tuple(
        _hashes(
            prompt=int(prompt),
            shared_tokens=spec.prefix_tokens if shares else 0,
            namespace=index + 1,
            block_tokens=spec.block_tokens,
        )
        for index, (prompt, shares) in enumerate(zip(prompts, sharing, strict=True))
    )
    return Workload(
        arrival_s=arrival,
        prompt_tokens=prompts.astype(np.int64),
        output_tokens=outputs,
        source=f"shared prefix {spec.prefix_tokens} x{spec.share:g} at {rate_per_s:.3g}/s",
        block_hashes=hashes,
        prefix_block_tokens=spec.block_tokens,
    )
