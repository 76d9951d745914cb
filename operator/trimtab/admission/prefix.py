"""Prompt prefixes as chains of block hashes, and an approximate index of who holds which block.

Pure: no I/O. Both sides of a prefix-aware deployment use it: the lab's replica emulator hashes
a prompt into blocks to decide what its modelled prefix cache holds, and a router hashes the
same prompt the same way to guess which pod holds it.

A prompt of ``n`` tokens has ``n // block_tokens`` full blocks; only full blocks are hashed,
because an engine caches only full blocks (vLLM's automatic prefix caching hashes full 16-token
KV blocks). Hashes are chained: block ``i``'s hash covers its own text and, through its
parent's digest, every block before it, so equal hashes mean equal prefixes and a lookup walks
a chain from its first block. Without a tokenizer a block is ``block_tokens * chars_per_token``
characters (OpenAI's rule of thumb is 4 characters a token).

:class:`PrefixIndex` is what a router can know without asking the engines: it learns from its
own routing history which pod was sent which blocks, and forgets them least recently used first
once a pod's share exceeds what its KV cache holds. It is approximate on purpose: an engine
evicts on its own schedule and never tells, so the index ages entries by the pod's capacity, not
by time.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Sequence
from typing import Generic, TypeVar

__all__ = [
    "SESSION_HEADER",
    "PrefixIndex",
    "chain_hashes",
    "prompt_block_hashes",
]

SESSION_HEADER = "x-session-id"
"""Request header naming a conversation; engines ignore it, session-affine routers hash it."""

Pod = TypeVar("Pod", bound=Hashable)


def chain_hashes(blocks: Iterable[bytes]) -> tuple[int, ...]:
    """One non-negative 63-bit hash per block, each covering every block before it too."""
    parent = b""
    hashes: list[int] = []
    for block in blocks:
        digest = hashlib.blake2b(parent + block, digest_size=8).digest()
        hashes.append(int.from_bytes(digest, "big") >> 1)
        parent = digest
    return tuple(hashes)


def prompt_block_hashes(*, text: str, block_tokens: int, chars_per_token: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of ``text``, ``block_tokens`` tokens each."""
    if block_tokens < 1 or chars_per_token < 1:
        raise ValueError("block_tokens and chars_per_token must be >= 1")
    width = block_tokens * chars_per_token
    full = len(text) // width
    # surrogatepass: JSON may carry lone surrogates, which still name a distinct prefix.
    return chain_hashes(
        text[index * width : (index + 1) * width].encode("utf-8", "surrogatepass")
        for index in range(full)
    )


class PrefixIndex(Generic[Pod]):
    """Which pod is believed to hold which blocks, learned from where requests were sent.

    Every pod has a capacity in blocks (its KV cache in tokens over the block size); recording
    blocks beyond it forgets that pod's least recently recorded ones. Recording a chain makes its
    first block the most recent, so a pod forgets the tail of an old prompt before its head, as
    engines do (vLLM frees a request's blocks tail first).
    """

    def __init__(self) -> None:
        self._capacity: dict[Pod, int] = {}
        self._held: dict[Pod, OrderedDict[int, None]] = {}
        self._holders: dict[int, set[Pod]] = {}

    @property
    def pods(self) -> tuple[Pod, ...]:
        return tuple(self._capacity)

    def capacity(self, *, pod: Pod) -> int:
        """Blocks ``pod`` may hold; ``KeyError`` for an unknown pod."""
        return self._capacity[pod]

    def held(self, *, pod: Pod) -> int:
        """Blocks currently believed held by ``pod`` (0 for an unknown pod)."""
        held = self._held.get(pod)
        return len(held) if held is not None else 0

    def set_capacity(self, *, pod: Pod, blocks: int) -> None:
        """Add ``pod`` or resize it; shrinking forgets its least recent blocks at once."""
        if blocks < 0:
            raise ValueError(f"capacity must be >= 0 blocks, got {blocks}")
        self._capacity[pod] = blocks
        self._held.setdefault(pod, OrderedDict())
        self._trim(pod)

    def remove(self, *, pod: Pod) -> None:
        """Forget ``pod`` and everything it held (it left the pool or restarted)."""
        self._capacity.pop(pod, None)
        for block in self._held.pop(pod, OrderedDict()):
            self._drop(block=block, pod=pod)

    def record(self, *, pod: Pod, hashes: Sequence[int]) -> None:
        """``pod`` was sent a prompt with these block hashes: it now holds them.

        ``KeyError`` for a pod without a capacity (call :meth:`set_capacity` first).
        """
        capacity = self._capacity[pod]
        held = self._held[pod]
        # Head last, so it is the most recent; a chain longer than the pod keeps its head.
        for block in reversed(hashes[:capacity]):
            if block in held:
                held.move_to_end(block)
            else:
                held[block] = None
                self._holders.setdefault(block, set()).add(pod)
        self._trim(pod)

    def matches(self, *, hashes: Sequence[int]) -> dict[Pod, int]:
        """Leading blocks of ``hashes`` each pod is believed to hold; pods holding none left out."""
        lengths: dict[Pod, int] = {}
        alive: set[Pod] = set()
        depth = 0
        for depth, block in enumerate(hashes):
            holders = self._holders.get(block, set())
            if depth == 0:
                alive = set(holders)
            else:
                for pod in alive - holders:
                    lengths[pod] = depth
                alive &= holders
            if not alive:
                return lengths
        for pod in alive:
            lengths[pod] = depth + 1
        return lengths

    def _trim(self, pod: Pod) -> None:
        held, capacity = self._held[pod], self._capacity[pod]
        while len(held) > capacity:
            block, _ = held.popitem(last=False)
            self._drop(block=block, pod=pod)

    def _drop(self, *, block: int, pod: Pod) -> None:
        holders = self._holders[block]
        holders.discard(pod)
        if not holders:
            del self._holders[block]
