"""A model of one Envoy cluster: host picking, per-host in-flight caps and pending queues.

Host picking follows Envoy's load balancers (``source/extensions/load_balancing_policies``):
with equal weights LEAST_REQUEST samples ``choice_count`` hosts at random (with replacement)
and keeps the one with the fewest active requests (P2C); with unequal weights it runs an EDF
schedule in which a host's weight ``weight / (active + 1) ** bias`` is recomputed only when the
host is picked; FULL_SCAN takes the fewest active, ties at random. ROUND_ROBIN is EDF on the
static weights. ``active`` counts requests attached to the host; with a per-host
``max_connections`` cap the excess waits in that host's own FIFO (never moved to another host)
and counts against the cluster's ``max_pending_requests``; overflow is a 503.
"""

from __future__ import annotations

import enum
import heapq
import math
import random
from collections import deque
from collections.abc import Sequence

__all__ = ["EnvoyCluster", "LbAlgorithm", "Outcome"]


class LbAlgorithm(enum.Enum):
    """The cluster's ``lb_policy``."""

    ROUND_ROBIN = enum.auto()
    LEAST_REQUEST = enum.auto()
    """N_CHOICES selection (P2C with the default ``choice_count`` 2)."""
    LEAST_REQUEST_FULL_SCAN = enum.auto()


class Outcome(enum.Enum):
    """What happened to a routed request."""

    SENT = enum.auto()
    PENDING = enum.auto()
    """Queued behind the host's cap; sent when one of its requests completes."""
    REJECTED = enum.auto()
    """``max_pending_requests`` overflow: 503 with ``x-envoy-overloaded``, never retried."""


class EnvoyCluster:
    """Hosts ``0..hosts-1``; the caller reports completions with :meth:`complete`."""

    def __init__(
        self,
        *,
        hosts: int,
        algorithm: LbAlgorithm,
        rng: random.Random,
        active_request_bias: float = 1.0,
        choice_count: int = 2,
        max_pending_requests: int | None = None,
    ) -> None:
        if hosts < 1:
            raise ValueError("a cluster needs at least one host")
        self.algorithm = algorithm
        self.active = [0] * hosts
        """Requests attached to each host (Envoy ``rq_active``), pending ones excluded."""
        self.pending_total = 0
        self.rejected = 0
        self._rng = rng
        self._bias = active_request_bias
        self._choices = choice_count
        self._max_pending = max_pending_requests
        self._weights = [1] * hosts
        self._caps: list[int | None] = [None] * hosts
        self._pending: list[deque[int]] = [deque() for _ in range(hosts)]
        self._equal = True
        self._edf: list[tuple[float, int, int]] = []
        self._edf_now = 0.0
        self._edf_seq = 0
        self._rr_next = rng.randrange(hosts)
        self._rebuild()

    @property
    def hosts(self) -> int:
        return len(self.active)

    def pending(self, host: int) -> int:
        """Requests waiting for ``host``'s cap."""
        return len(self._pending[host])

    def configure(
        self, *, weights: Sequence[int], caps: Sequence[int | None]
    ) -> list[tuple[int, int]]:
        """Apply new weights and caps (an EDS/CDS push).

        Returns ``(request, host)`` for each pending request that a raised cap lets through.
        """
        if len(weights) != self.hosts or len(caps) != self.hosts:
            raise ValueError("one weight and one cap per host")
        if any(w < 1 for w in weights) or any(c is not None and c < 1 for c in caps):
            raise ValueError("weights and caps must be >= 1")
        self._caps = list(caps)
        if list(weights) != self._weights:
            self._weights = list(weights)
            self._rebuild()
        released: list[tuple[int, int]] = []
        for host in range(self.hosts):
            while self._pending[host] and self._below_cap(host):
                released.append((self._send_pending(host), host))
        return released

    def route(self, request: int) -> tuple[Outcome, int]:
        """Pick a host for ``request``: sent, queued behind that host's cap, or rejected."""
        host = self._pick()
        if self._below_cap(host):
            self.active[host] += 1
            return Outcome.SENT, host
        if self._max_pending is not None and self.pending_total >= self._max_pending:
            self.rejected += 1
            return Outcome.REJECTED, host
        self._pending[host].append(request)
        self.pending_total += 1
        return Outcome.PENDING, host

    def complete(self, host: int) -> int | None:
        """A request on ``host`` finished; return the pending request sent in its place."""
        self.active[host] -= 1
        if self._pending[host] and self._below_cap(host):
            return self._send_pending(host)
        return None

    def _below_cap(self, host: int) -> bool:
        cap = self._caps[host]
        return cap is None or self.active[host] < cap

    def _send_pending(self, host: int) -> int:
        self.pending_total -= 1
        self.active[host] += 1
        return self._pending[host].popleft()

    # -- picking -----------------------------------------------------------------------------

    def _pick(self) -> int:
        if self.algorithm is LbAlgorithm.LEAST_REQUEST_FULL_SCAN:
            return self._full_scan()
        if self._equal:
            if self.algorithm is LbAlgorithm.ROUND_ROBIN:
                host = self._rr_next
                self._rr_next = (host + 1) % self.hosts
                return host
            return self._n_choices()
        return self._edf_pick()

    def _n_choices(self) -> int:
        active, count = self.active, self.hosts
        best = self._rng.randrange(count)
        for _ in range(self._choices - 1):
            sampled = self._rng.randrange(count)
            if active[sampled] < active[best]:
                best = sampled
        return best

    def _full_scan(self) -> int:
        least = min(self.active)
        ties = [h for h, a in enumerate(self.active) if a == least]
        return ties[0] if len(ties) == 1 else self._rng.choice(ties)

    def _effective_weight(self, host: int) -> float:
        weight = float(self._weights[host])
        if self.algorithm is LbAlgorithm.ROUND_ROBIN or self._bias == 0.0:
            return weight
        scale: float = math.pow(self.active[host] + 1, self._bias)
        return weight / scale

    def _edf_pick(self) -> int:
        deadline, _, host = heapq.heappop(self._edf)
        self._edf_now = deadline
        self._edf_push(host)
        return host

    def _edf_push(self, host: int) -> None:
        self._edf_seq += 1
        deadline = self._edf_now + 1.0 / self._effective_weight(host)
        heapq.heappush(self._edf, (deadline, self._edf_seq, host))

    def _rebuild(self) -> None:
        self._equal = len(set(self._weights)) == 1
        self._edf = []
        self._edf_now = 0.0
        for host in range(self.hosts):
            # Envoy randomises where a fresh schedule starts so that many proxies do not pick
            # in lockstep; a random phase within one period has the same effect.
            self._edf_seq += 1
            period = 1.0 / self._effective_weight(host)
            heapq.heappush(self._edf, (period * self._rng.random(), self._edf_seq, host))
