"""Prefix-aware balancers: ring hash with bounded load, an llm-d-like scorer, ideal with prefixes.

``ring_hash`` is Envoy's ``RING_HASH`` load balancer on a request key (the session id, as a
gateway would hash a session header, or the prompt's first block hashes), with Envoy's
``hash_balance_factor`` bounded load. The ring follows ``ring_hash_lb.cc``: each host gets ring
entries in proportion to its normalized weight, scaled so that the lightest host has
``ceil(w_min * minimum_ring_size)`` of them; a key goes to the first entry at or after its hash.
Bounded load follows ``thread_aware_lb_impl.cc``: with ``A`` requests active in the cluster a
host of normalized weight ``w`` has ``max(1, ceil(ceil((A + 1) * factor / 100) * w))`` slots and
is overloaded when its active requests exceed them; an overloaded pick probes the other hosts in
a random order seeded by the key's hash (the same key always probes the same order), takes the
first one not overloaded, else the least overloaded.

``trimtab_ring`` is that ring driven by trimtab: the policy's weights bend the ring (a loaded
pod owns fewer keys and fewer slots) and its caps are Envoy's per-host ``max_connections`` with
the per-host pending queues of :mod:`trimtab_lab.sim.envoy`.

``prefix_scorer`` is an llm-d-like endpoint picker (the inference scheduler's default profile):
per request, score = ``prefix_weight`` x matched share of the prompt's blocks (from an
approximate index of its own routing history, :class:`trimtab.admission.prefix.PrefixIndex`,
each pod's capacity its KV cache) + ``queue_weight`` x min-max normalised waiting-queue
headroom + ``kv_weight`` x (1 - KV usage), on engine metrics refreshed every 50 ms; the highest
wins, ties at random. Nothing guards a pod the prefix keeps winning: that is the point.

``ideal_prefix`` is the ``ideal`` shared queue with perfect knowledge of every engine's cache:
among the replicas that can admit the head now, it estimates each one's first token counting
only the uncached part of the prompt, treats estimates within one iteration of the soonest as
equal and among those takes the longest cached prefix (then the faster decode, then the lowest
index).

``trimtab_picker`` with affinity is built elsewhere; it reads each request's block hashes and
session from :attr:`Fleet.block_hashes` and :attr:`Fleet.sessions`, as these do.
"""

from __future__ import annotations

import bisect
import hashlib
import math
import random
from collections import deque
from collections.abc import Sequence

from trimtab.admission.prefix import PrefixIndex
from trimtab.policy import PolicySettings
from trimtab_lab.sim.engine import Fleet
from trimtab_lab.sim.envoy import Outcome
from trimtab_lab.sim.prefix_specs import AffinitySpec, HashKey, ScorerSpec
from trimtab_lab.sim.trimtab_balancer import Decided, Observation, PolicyLoop

__all__ = [
    "HashRing",
    "PrefixScorer",
    "RequestKeys",
    "RingCluster",
    "RingHashBalancer",
    "TrimtabRingBalancer",
]

_MAX_RING_SIZE = 8 * 1024 * 1024
"""Envoy's default ``maximum_ring_size``."""


def _hash64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


class HashRing:
    """Envoy's ring of weighted hosts, with optional bounded load."""

    def __init__(
        self, *, hosts: int, minimum_ring_size: int = 1024, hash_balance_factor: int | None = None
    ) -> None:
        if hosts < 1 or minimum_ring_size < 1:
            raise ValueError("a ring needs at least one host and one entry")
        if hash_balance_factor is not None and hash_balance_factor < 100:
            raise ValueError("hash_balance_factor is a percentage of the mean, >= 100")
        self._minimum = minimum_ring_size
        self._factor = hash_balance_factor
        self._entry_hashes: list[list[int]] = [[] for _ in range(hosts)]
        self._weights: list[float] = []
        self._points: list[int] = []
        self._owners: list[int] = []
        self.configure(weights=[1] * hosts)

    @property
    def hosts(self) -> int:
        return len(self._entry_hashes)

    @property
    def size(self) -> int:
        """Entries on the ring."""
        return len(self._points)

    def configure(self, *, weights: Sequence[int]) -> None:
        """Rebuild the ring for new host weights (an EDS update); no-op when unchanged."""
        if len(weights) != self.hosts or any(w < 1 for w in weights):
            raise ValueError("one weight >= 1 per host")
        total = float(sum(weights))
        normalized = [w / total for w in weights]
        if normalized == self._weights:
            return
        self._weights = normalized
        lightest = min(normalized)
        scale = min(math.ceil(lightest * self._minimum) / lightest, float(_MAX_RING_SIZE))
        entries: list[tuple[int, int]] = []
        target, placed = 0.0, 0
        for host, weight in enumerate(normalized):
            target += scale * weight
            count = 0
            while placed < target:
                entries.append((self._entry_hash(host, count), host))
                count += 1
                placed += 1
        entries.sort()
        self._points = [point for point, _ in entries]
        self._owners = [owner for _, owner in entries]

    def primary(self, *, key: int) -> int:
        """The host owning ``key`` on the ring, load ignored."""
        index = bisect.bisect_left(self._points, key)
        return self._owners[index if index < len(self._owners) else 0]

    def pick(self, *, key: int, active: Sequence[int]) -> int:
        """The host for ``key`` given each host's active requests (bounded load applied)."""
        host = self.primary(key=key)
        if self._factor is None:
            return host
        total_slots = ((sum(active) + 1) * self._factor + 99) // 100
        overload = self._overload(host=host, active=active, total_slots=total_slots)
        if overload <= 1.0:
            return host
        order = list(range(self.hosts))
        rng = random.Random(key)
        best, best_overload = host, overload
        for index in range(self.hosts):
            # Fisher-Yates as it goes: a random probe order fixed by the key.
            swap = index + rng.randrange(self.hosts - index)
            order[index], order[swap] = order[swap], order[index]
            candidate = order[index]
            if candidate == host:
                continue
            load = self._overload(host=candidate, active=active, total_slots=total_slots)
            if load <= 1.0:
                return candidate
            if load < best_overload:
                best, best_overload = candidate, load
        return best

    def _overload(self, *, host: int, active: Sequence[int], total_slots: int) -> float:
        slots = max(math.ceil(total_slots * self._weights[host]), 1)
        return active[host] / slots

    def _entry_hash(self, host: int, index: int) -> int:
        cached = self._entry_hashes[host]
        while len(cached) <= index:
            cached.append(_hash64(f"r{host}_{len(cached)}".encode()))
        return cached[index]


class RequestKeys:
    """The 64-bit ring key of each request: its session, or its prompt's first blocks."""

    def __init__(self, *, hash_key: HashKey, key_blocks: int) -> None:
        self._hash_key = hash_key
        self._key_blocks = key_blocks

    def key(self, *, fleet: Fleet, request: int) -> int:
        session = fleet.sessions[request]
        if self._hash_key is HashKey.SESSION and session >= 0:
            return _hash64(b"session:%d" % session)
        blocks = fleet.block_hashes[request][: self._key_blocks]
        if not blocks:
            # Nothing to hash on: like a missing header, the request lands anywhere.
            return _hash64(b"request:%d" % request)
        return _hash64(b"prefix:" + b",".join(b"%d" % block for block in blocks))


class RingCluster:
    """An Envoy cluster on a :class:`HashRing`: per-host caps, pending queues, 503 overflow."""

    def __init__(self, *, ring: HashRing, max_pending_requests: int | None = None) -> None:
        self.ring = ring
        hosts = ring.hosts
        self.active = [0] * hosts
        """Requests attached to each host (``rq_active``), pending ones excluded."""
        self.pending_total = 0
        self._caps: list[int | None] = [None] * hosts
        self._pending: list[deque[int]] = [deque() for _ in range(hosts)]
        self._max_pending = max_pending_requests

    def configure(
        self, *, weights: Sequence[int], caps: Sequence[int | None]
    ) -> list[tuple[int, int]]:
        """New weights and caps; ``(request, host)`` for pending requests a raised cap frees."""
        self.ring.configure(weights=weights)
        self._caps = list(caps)
        released = []
        for host in range(self.ring.hosts):
            while self._pending[host] and self._below_cap(host):
                released.append((self._send_pending(host), host))
        return released

    def route(self, *, request: int, key: int) -> tuple[Outcome, int]:
        host = self.ring.pick(key=key, active=self.active)
        if self._below_cap(host):
            self.active[host] += 1
            return Outcome.SENT, host
        if self._max_pending is not None and self.pending_total >= self._max_pending:
            return Outcome.REJECTED, host
        self._pending[host].append(request)
        self.pending_total += 1
        return Outcome.PENDING, host

    def complete(self, host: int) -> int | None:
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


class RingHashBalancer:
    """Requests through a :class:`RingCluster`; equal weights and no caps unless configured."""

    def __init__(self, *, cluster: RingCluster, keys: RequestKeys) -> None:
        self.cluster = cluster
        self._keys = keys
        self._fleet: Fleet | None = None

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet

    def on_arrival(self, *, request: int, now: float) -> None:
        fleet = self._ready()
        key = self._keys.key(fleet=fleet, request=request)
        outcome, host = self.cluster.route(request=request, key=key)
        if outcome is Outcome.SENT:
            fleet.send(request=request, host=host, now=now)
        elif outcome is Outcome.REJECTED:
            fleet.reject(request=request, now=now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        released = self.cluster.complete(host)
        if released is not None:
            self._ready().send(request=released, host=host, now=now)

    def _ready(self) -> Fleet:
        if self._fleet is None:
            raise RuntimeError("balancer used before start()")
        return self._fleet


class TrimtabRingBalancer(RingHashBalancer):
    """Ring hash whose weights and caps come from trimtab's policy on stale metrics."""

    def __init__(
        self,
        *,
        hosts: int,
        affinity: AffinitySpec,
        settings: PolicySettings,
        observation: Observation,
    ) -> None:
        ring = HashRing(
            hosts=hosts,
            minimum_ring_size=affinity.ring_size,
            hash_balance_factor=affinity.hash_balance_factor,
        )
        super().__init__(
            cluster=RingCluster(ring=ring, max_pending_requests=settings.max_pending_requests),
            keys=RequestKeys(hash_key=affinity.hash_key, key_blocks=affinity.key_blocks),
        )
        self._loop = PolicyLoop(
            hosts=hosts, settings=settings, observation=observation, apply=self._apply
        )
        self._names = self._loop.names

    def start(self, *, fleet: Fleet) -> None:
        super().start(fleet=fleet)
        self._loop.start(fleet=fleet)

    def _apply(self, decided: Decided, now: float) -> None:
        by_name = decided.decision.by_name()
        weights = [by_name[name].weight for name in self._names]
        caps: list[int | None] = [by_name[name].max_in_flight for name in self._names]
        fleet = self._ready()
        for request, host in self.cluster.configure(weights=weights, caps=caps):
            fleet.send(request=request, host=host, now=now)


class PrefixScorer:
    """llm-d-like scoring: prefix match + queue + KV on 50 ms-old metrics, no load guard."""

    def __init__(self, *, spec: ScorerSpec, rng: random.Random) -> None:
        self._spec = spec
        self._rng = rng
        self._taken_s = -math.inf
        self._waiting: list[int] = []
        self._kv: list[float] = []
        self.index: PrefixIndex[int] = PrefixIndex()
        self._fleet: Fleet | None = None

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet
        for host, replica in enumerate(fleet.replicas):
            block = replica.prefix_block_tokens or 1
            self.index.set_capacity(pod=host, blocks=replica.profile.kv_capacity_tokens // block)

    def on_arrival(self, *, request: int, now: float) -> None:
        fleet = self._fleet
        assert fleet is not None
        if now - self._taken_s >= self._spec.refresh:
            states = [fleet.observe(host=h, now=now) for h in range(len(fleet.replicas))]
            self._waiting = [s.waiting for s in states]
            self._kv = [s.kv_usage for s in states]
            self._taken_s = now
        hashes = fleet.block_hashes[request]
        host = self._pick(hashes)
        self.index.record(pod=host, hashes=hashes)
        fleet.send(request=request, host=host, now=now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        """The scorer keeps no per-request state."""

    def _pick(self, hashes: Sequence[int]) -> int:
        spec, waiting, kv = self._spec, self._waiting, self._kv
        matched = self.index.matches(hashes=hashes) if hashes else {}
        low, high = min(waiting), max(waiting)
        best_score, best = -math.inf, [0]
        for host in range(len(waiting)):
            queue = 1.0 if high == low else (high - waiting[host]) / (high - low)
            prefix = matched.get(host, 0) / len(hashes) if hashes else 0.0
            score = (
                spec.prefix_weight * prefix
                + spec.queue_weight * queue
                + spec.kv_weight * (1.0 - kv[host])
            )
            if score > best_score:
                best_score, best = score, [host]
            elif score == best_score:
                best.append(host)
        return best[0] if len(best) == 1 else self._rng.choice(best)
