"""Prefix affinity under a load guard: send a request where its prompt is likely cached, but never
onto a pod loaded beyond a bounded factor of the least-loaded one.

An engine with prefix caching skips prefill for the leading blocks it already holds, so among
the pods that may take a request now the best is the one expected to save the most prefill. The
expectation comes from admission's own routing history (:class:`PrefixIndex`: which pod was
sent which blocks, aged per pod by its KV size in blocks) and from the pod a session was last
sent to, with the prompt tokens it carried then.

The guard is the one of consistent hashing with bounded loads (Mirrokni, Thorup and Zadimoghaddam,
2018), taken relative to the least-loaded admissible pod instead of the mean: with the request
counted, a cached pod's in-flight requests per unit of speed may exceed the least-loaded pod's
(its own request counted too) by ``affinity_load_factor`` at most, rounded up to whole requests.
That is what keeps a hot prefix from piling the traffic onto the pods that hold it (the
cache-aware death spiral); the cap and the KV budget hold anyway, as affinity only reorders the
pods that admission would admit.

Cost per request: one :meth:`PrefixIndex.matches` walk (O(blocks x pods holding the first
block)), a linear pass keeping the ``_CANDIDATES`` best matches, then at most those looked at:
O(pods) when one hot prefix is on every pod (``benchmarks/bench_affinity_admission.py``).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from trimtab.admission.pods import PodState, SortKey
from trimtab.admission.prefix import PrefixIndex
from trimtab.admission.records import Ask, PickReason
from trimtab.api.records import PodName

__all__ = ["Affinity", "Choice", "within_bound"]

_CANDIDATES = 8
"""Pods holding part of the prefix looked at per request, longest match first."""

_UNKNOWN_KV_BLOCKS = 1024
"""Index capacity of a pod that does not report its KV size (512k tokens at 512-token blocks)."""

_SESSIONS = 100_000
"""Sessions remembered, least recently used forgotten first."""

# Float products such as 1.1 * 10 land just above a whole number; rounding them up would let a
# pod one request past the bound.
_EPSILON = 1e-9


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The pods for one grant, best first, and why the first one."""

    pods: list[PodState]
    reason: PickReason
    hit_tokens: int


def within_bound(*, pod: PodState, least: PodState, factor: float) -> bool:
    """Whether ``pod`` with one more request stays within ``factor`` of ``least`` with one more."""
    if pod is least:
        return True
    bound = factor * (least.in_flight + 1) / least.capacity.speed * pod.capacity.speed
    return pod.in_flight + 1 <= math.ceil(bound - _EPSILON)


def _rank(entry: tuple[int, SortKey, PodState]) -> tuple[int, SortKey]:
    return entry[0], entry[1]


class Affinity:
    """Which pod holds which prefix, and the guarded choice among admissible pods."""

    def __init__(self, *, block_tokens: int, load_factor: float) -> None:
        self.block_tokens = block_tokens
        self.load_factor = load_factor
        self._index: PrefixIndex[PodName] = PrefixIndex()
        self._sessions: OrderedDict[str, tuple[PodName, int]] = OrderedDict()

    def set_pods(self, *, pods: Iterable[PodState]) -> None:
        """Size every pod's share of the index by its KV cache; forget pods that left."""
        present: set[PodName] = set()
        for pod in pods:
            name = pod.capacity.name
            present.add(name)
            size = pod.capacity.kv_capacity_tokens
            blocks = _UNKNOWN_KV_BLOCKS if size is None else size // self.block_tokens
            self._index.set_capacity(pod=name, blocks=blocks)
        for name in self._index.pods:
            if name not in present:
                self._index.remove(pod=name)

    def record(self, *, pod: PodName, ask: Ask) -> None:
        """``ask`` was granted ``pod``: the pod now holds its prefix and its session."""
        if ask.prefix:
            self._index.record(pod=pod, hashes=ask.prefix)
        if ask.session is not None:
            sessions = self._sessions
            sessions[ask.session] = (pod, ask.prompt_tokens)
            sessions.move_to_end(ask.session)
            if len(sessions) > _SESSIONS:
                sessions.popitem(last=False)

    def choose(
        self,
        *,
        ask: Ask,
        normal: list[PodState],
        pods: Callable[[PodName], PodState | None],
        admissible: Callable[[PodState], bool],
        limit: int,
    ) -> Choice:
        """Reorder ``normal`` (admission's choice, least loaded first) for ``ask``'s prefix."""
        if not ask.prefix and ask.session is None:
            return Choice(pods=normal, reason=PickReason.NORMAL, hit_tokens=0)
        expected = self._expected(ask)
        if not expected:
            return Choice(pods=normal, reason=PickReason.MISS, hit_tokens=0)
        least = normal[0]
        ranked = heapq.nsmallest(
            _CANDIDATES,
            ((-tokens, pod.key, pod) for name, tokens in expected.items() if (pod := pods(name))),
            key=_rank,
        )
        reason: PickReason | None = None
        for negative, _, pod in ranked:
            tokens = -negative
            allowed = ask.subset is None or pod.capacity.address in ask.subset
            if not (pod.has_room and allowed and admissible(pod)):
                reason = reason or PickReason.NO_ROOM
                continue
            if not within_bound(pod=pod, least=least, factor=self.load_factor):
                reason = reason or PickReason.LOAD_GUARD
                continue
            rest = [other for other in normal if other is not pod]
            return Choice(
                pods=[pod, *rest][:limit], reason=reason or PickReason.HIT, hit_tokens=tokens
            )
        return Choice(pods=normal, reason=reason or PickReason.MISS, hit_tokens=0)

    def _expected(self, ask: Ask) -> dict[PodName, int]:
        """Prompt tokens each pod is expected to hold for ``ask`` (pods holding none left out)."""
        block_tokens = self.block_tokens
        expected = {
            pod: blocks * block_tokens
            for pod, blocks in self._index.matches(hashes=ask.prefix).items()
        }
        if ask.session is not None:
            last = self._sessions.get(ask.session)
            if last is not None:
                pod, tokens = last
                # The history sent last time is the head of this prompt, as far as it reaches.
                held = min(tokens, ask.prompt_tokens)
                if held > 0:
                    expected[pod] = max(expected.get(pod, 0), held)
        return expected
