"""Choosing pods: fewest in-flight per unit of speed, then most KV headroom, then name.

Pods with room sit in a binary heap of ``(key, version)`` entries. A pod whose key changes gets
a new entry and its old one turns into garbage, recognised by its version and dropped when it
reaches the top; the heap is rebuilt once garbage outnumbers the pods. Finding the best few pods
for a request pops entries until enough of them pass the request's test (KV budget, subset,
waiting requests ahead) and pushes the passing and failing ones back: O(log n) per entry looked
at. When many pods in a row fail (KV-bound traffic), one linear scan is cheaper than popping the
whole heap, so the search switches to it after ``_POPS_BEFORE_SCAN`` failures: O(pods) at worst.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from trimtab.admission.pods import PodState, SortKey
from trimtab.api.records import PodName

__all__ = ["PodIndex", "best_of"]

_POPS_BEFORE_SCAN = 32

_Entry = tuple[SortKey, int]


def _key(pod: PodState) -> SortKey:
    return pod.key


def best_of(
    *, pods: Iterable[PodState], passes: Callable[[PodState], bool], limit: int
) -> list[PodState]:
    """The ``limit`` best pods with room among ``pods`` that pass, best first (linear)."""
    return heapq.nsmallest(limit, (p for p in pods if p.has_room and passes(p)), key=_key)


class PodIndex:
    def __init__(self) -> None:
        self._pods: dict[PodName, PodState] = {}
        self._heap: list[_Entry] = []

    def rebuild(self, *, pods: dict[PodName, PodState]) -> None:
        self._pods = pods
        self._heap = [(pod.key, pod.version) for pod in pods.values() if pod.has_room]
        heapq.heapify(self._heap)

    def update(self, pod: PodState) -> None:
        """Index ``pod`` under its current key (call after :meth:`PodState.rekey`)."""
        if not pod.has_room:
            return
        if len(self._heap) > 2 * len(self._pods) + 64:
            self.rebuild(pods=self._pods)
        else:
            heapq.heappush(self._heap, (pod.key, pod.version))

    def best(self, *, passes: Callable[[PodState], bool], limit: int) -> list[PodState]:
        """The ``limit`` best pods with room that pass, best first."""
        heap = self._heap
        pods = self._pods
        found: list[PodState] = []
        kept: list[_Entry] = []
        failures = 0
        while heap and len(found) < limit:
            entry = heapq.heappop(heap)
            pod = pods.get(entry[0][2])
            if pod is None or pod.version != entry[1] or not pod.has_room:
                continue
            kept.append(entry)
            if passes(pod):
                found.append(pod)
                continue
            failures += 1
            if failures > _POPS_BEFORE_SCAN:
                found = best_of(pods=pods.values(), passes=passes, limit=limit)
                break
        for entry in kept:
            heapq.heappush(heap, entry)
        return found
