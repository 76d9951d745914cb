"""The one shared queue: priority classes, FIFO inside a class, a deadline per request.

Each class is an ordered dict (a linked list in CPython), so adding, taking the head and
withdrawing any request are O(1). Besides the order the queue keeps, per class, how many waiting
requests may use any pod and how many may use each address of a subset hint: an arriving ask
must not take a pod that a request ahead of it is waiting for, and these counts answer that
without walking the queue.
"""

from __future__ import annotations

import itertools
from collections import Counter, OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from trimtab.admission.records import Ask, RequestId

__all__ = ["Waiting", "WaitingQueue"]


@dataclass(slots=True, kw_only=True, eq=False)
class Waiting:
    ask: Ask
    priority: int
    """The class it waits in (the ask's priority, clamped to the last class)."""
    footprint: int
    enqueued_at: float
    seq: int
    """Arrival order across classes, to merge classes when their number shrinks."""


class WaitingQueue:
    def __init__(self, *, classes: int) -> None:
        self._classes: list[OrderedDict[RequestId, Waiting]] = [
            OrderedDict() for _ in range(classes)
        ]
        self._open = [0] * classes
        self._claims: list[Counter[str]] = [Counter() for _ in range(classes)]
        self._restricted = 0
        self._size = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self._size

    def __contains__(self, id: RequestId) -> bool:
        return any(id in waiting for waiting in self._classes)

    @property
    def classes(self) -> int:
        return len(self._classes)

    @property
    def restricted(self) -> int:
        """Waiting requests with a subset hint."""
        return self._restricted

    def sizes(self) -> tuple[int, ...]:
        return tuple(len(waiting) for waiting in self._classes)

    def clamp(self, priority: int) -> int:
        return min(priority, len(self._classes) - 1)

    def add(self, *, ask: Ask, footprint: int, now: float) -> int:
        """Queue ``ask`` at the tail of its class; return how many requests are ahead of it."""
        priority = self.clamp(ask.priority)
        self._insert(
            Waiting(
                ask=ask,
                priority=priority,
                footprint=footprint,
                enqueued_at=now,
                seq=next(self._seq),
            )
        )
        return sum(len(self._classes[c]) for c in range(priority + 1)) - 1

    def _insert(self, waiting: Waiting) -> None:
        self._classes[waiting.priority][waiting.ask.id] = waiting
        self._size += 1
        subset = waiting.ask.subset
        if subset is None:
            self._open[waiting.priority] += 1
        else:
            self._restricted += 1
            self._claims[waiting.priority].update(subset)

    def remove(self, id: RequestId) -> Waiting | None:
        for waiting in self._classes:
            found = waiting.pop(id, None)
            if found is not None:
                self._forget(found)
                return found
        return None

    def _forget(self, waiting: Waiting) -> None:
        self._size -= 1
        subset = waiting.ask.subset
        if subset is None:
            self._open[waiting.priority] -= 1
        else:
            self._restricted -= 1
            claims = self._claims[waiting.priority]
            claims.subtract(subset)
            for address in subset:
                if claims[address] <= 0:
                    del claims[address]

    def position(self, id: RequestId) -> int | None:
        for ahead, waiting in enumerate(self):
            if waiting.ask.id == id:
                return ahead
        return None

    def __iter__(self) -> Iterator[Waiting]:
        """Every waiting request in service order: class 0 first, FIFO inside a class."""
        for waiting in self._classes:
            yield from waiting.values()

    def ahead_of(self, *, priority: int) -> tuple[bool, frozenset[str]]:
        """What the requests waiting at ``priority`` or better hold back from a newcomer.

        ``(True, ...)`` when one of them may use any pod (the newcomer queues behind it);
        otherwise the addresses some of them may use.
        """
        last = self.clamp(priority)
        if any(self._open[c] for c in range(last + 1)):
            return True, frozenset()
        if not self._restricted:
            return False, frozenset()
        claimed: set[str] = set()
        for c in range(last + 1):
            claimed.update(self._claims[c])
        return False, frozenset(claimed)

    def expire(self, *, now: float, ttl_s: float) -> list[Waiting]:
        """Remove and return every request that has waited ``ttl_s`` or longer."""
        gone = []
        for waiting in self._classes:
            while waiting:
                head = next(iter(waiting.values()))
                if now < head.enqueued_at + ttl_s:
                    break
                waiting.popitem(last=False)
                self._forget(head)
                gone.append(head)
        return gone

    def next_deadline(self, *, ttl_s: float) -> float | None:
        heads = [next(iter(waiting.values())).enqueued_at for waiting in self._classes if waiting]
        return min(heads) + ttl_s if heads else None

    def pop_newest(self) -> Waiting:
        """Remove the request served last (tail of the lowest non-empty class)."""
        for waiting in reversed(self._classes):
            if waiting:
                _, newest = waiting.popitem(last=True)
                self._forget(newest)
                return newest
        raise IndexError("pop_newest from an empty queue")

    def reclass(self, *, classes: int) -> None:
        """Change the number of classes, keeping arrival order inside each new class."""
        everyone = sorted(self, key=lambda w: (min(w.ask.priority, classes - 1), w.seq))
        self._classes = [OrderedDict() for _ in range(classes)]
        self._open = [0] * classes
        self._claims = [Counter() for _ in range(classes)]
        self._restricted = 0
        self._size = 0
        for waiting in everyone:
            waiting.priority = min(waiting.ask.priority, classes - 1)
            self._insert(waiting)
