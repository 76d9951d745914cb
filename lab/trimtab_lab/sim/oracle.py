"""The ``oracle`` balancer: a clairvoyant shared queue that reserves whole KV footprints.

It knows every request's output length, which no real balancer does, and reserves the request's
full KV footprint (prompt plus output tokens, in blocks) on the replica it sends it to, so no
engine ever runs out of KV and nothing is ever preempted. One FIFO for the fleet: the head goes
to the replica with the most unreserved KV among those whose unreserved KV holds its whole
footprint and whose batch has room under ``max_num_seqs``; while none does, the head waits and
so does everyone behind it. A replica with nothing on it takes any request (never starve), as
an engine admits a lone request whatever its size.

Together with ``ideal`` it makes the bound of a report (:mod:`trimtab_lab.sim.bound`): where KV
binds, reserving footprints beats every per-request heuristic; where it does not, reserving a
10,000-token agent's footprint makes everyone behind it wait, and ``ideal`` is the better one.
"""

from __future__ import annotations

import math
from collections import deque

from trimtab_lab.sim.engine import Fleet

__all__ = ["Oracle"]


class Oracle:
    """Shared FIFO with exact, clairvoyant KV reservations per replica."""

    def __init__(self) -> None:
        self._queue: deque[int] = deque()
        self._fleet: Fleet | None = None
        self._unreserved: list[int] = []
        self._in_flight: list[int] = []
        self._reserved: dict[int, int] = {}

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet
        # The engine admits a request only while its watermark of blocks stays free, so a
        # reservation may use every block but those.
        self._unreserved = [
            r.profile.num_gpu_blocks - math.ceil(r.profile.watermark * r.profile.num_gpu_blocks)
            for r in fleet.replicas
        ]
        self._in_flight = [0] * len(fleet.replicas)

    @property
    def unreserved_blocks(self) -> tuple[int, ...]:
        """KV blocks per replica not reserved by a request in flight."""
        return tuple(self._unreserved)

    def on_arrival(self, *, request: int, now: float) -> None:
        self._queue.append(request)
        self._dispatch(now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        self._unreserved[host] += self._reserved.pop(request)
        self._in_flight[host] -= 1
        self._dispatch(now)

    def _dispatch(self, now: float) -> None:
        fleet = self._fleet
        assert fleet is not None
        while self._queue:
            head = self._queue[0]
            tokens = fleet.prompt_tokens[head] + fleet.output_tokens[head]
            host = self._choose(fleet=fleet, tokens=tokens)
            if host < 0:
                return
            self._queue.popleft()
            blocks = -(-tokens // fleet.replicas[host].profile.block_size)
            self._reserved[head] = blocks
            self._unreserved[host] -= blocks
            self._in_flight[host] += 1
            fleet.send(request=head, host=host, now=now)

    def _choose(self, *, fleet: Fleet, tokens: int) -> int:
        """The replica with the most unreserved KV that holds ``tokens`` whole, or -1."""
        best, best_free = -1, -math.inf
        for host, replica in enumerate(fleet.replicas):
            profile = replica.profile
            in_flight = self._in_flight[host]
            if in_flight >= profile.max_num_seqs:
                continue
            free = self._unreserved[host]
            if in_flight > 0 and free < -(-tokens // profile.block_size):
                continue
            if free > best_free:
                best, best_free = host, free
        return best
