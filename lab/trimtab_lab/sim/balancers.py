"""The baseline balancers: Envoy ROUND_ROBIN and LEAST_REQUEST, an endpoint picker, ideal.

``round_robin``, ``least_request`` and ``least_request_full_scan`` are Envoy clusters with equal
weights and no caps (circuit breakers raised out of the way). ``epp`` scores every request on
engine metrics refreshed every 50 ms, like the Gateway API Inference Extension's endpoint
picker. ``ideal`` holds one shared FIFO and, on fresh state, hands the head to the replica that
will give it its first token soonest as soon as one can admit it at once: the lower bound.
trimtab itself is in :mod:`trimtab_lab.sim.trimtab_balancer`.
"""

from __future__ import annotations

import math
import random
from collections import deque

from trimtab_lab.sim.engine import Fleet
from trimtab_lab.sim.envoy import EnvoyCluster, LbAlgorithm, Outcome

__all__ = ["EndpointPicker", "EnvoyBalancer", "SharedQueue", "envoy_baseline"]


class EnvoyBalancer:
    """Requests go through an :class:`EnvoyCluster`; subclasses may reconfigure it."""

    def __init__(self, *, cluster: EnvoyCluster) -> None:
        self.cluster = cluster
        self.fleet: Fleet | None = None

    def start(self, *, fleet: Fleet) -> None:
        self.fleet = fleet

    def on_arrival(self, *, request: int, now: float) -> None:
        fleet = self._fleet()
        outcome, host = self.cluster.route(request)
        if outcome is Outcome.SENT:
            fleet.send(request=request, host=host, now=now)
        elif outcome is Outcome.REJECTED:
            fleet.reject(request=request, now=now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        released = self.cluster.complete(host)
        if released is not None:
            self._fleet().send(request=released, host=host, now=now)

    def _fleet(self) -> Fleet:
        if self.fleet is None:
            raise RuntimeError("balancer used before start()")
        return self.fleet


def envoy_baseline(*, algorithm: LbAlgorithm, hosts: int, rng: random.Random) -> EnvoyBalancer:
    """An Envoy cluster with equal weights, bias 1, two choices and no caps."""
    return EnvoyBalancer(cluster=EnvoyCluster(hosts=hosts, algorithm=algorithm, rng=rng))


class EndpointPicker:
    """Per-request filter-and-score on metrics at most ``refresh_s`` old (GIE-style EPP).

    Filter: keep the pods whose queue is in the lowest band ``[min, min + (max - min) / n]``
    (the inference extension's least-queue filter). Score: KV headroom ``1 - kv`` plus queue
    headroom ``1 - waiting / (max_waiting + 1)``; the best wins, ties at random. Metrics are
    refreshed when the snapshot is older than ``refresh_s`` at an arrival, so requests routed
    within one window do not see each other, as with the real picker's 50 ms scrape loop.
    """

    def __init__(self, *, rng: random.Random, refresh_s: float = 0.05) -> None:
        self._rng = rng
        self._refresh_s = refresh_s
        self._taken_s = -float("inf")
        self._waiting: list[int] = []
        self._kv: list[float] = []
        self._fleet: Fleet | None = None

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet

    def on_arrival(self, *, request: int, now: float) -> None:
        fleet = self._fleet
        assert fleet is not None
        if now - self._taken_s >= self._refresh_s:
            states = [fleet.observe(host=h, now=now) for h in range(len(fleet.replicas))]
            self._waiting = [s.waiting for s in states]
            self._kv = [s.kv_usage for s in states]
            self._taken_s = now
        fleet.send(request=request, host=self._pick(), now=now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        """The picker holds no per-request state."""

    def _pick(self) -> int:
        waiting, kv = self._waiting, self._kv
        low, high = min(waiting), max(waiting)
        band = low + (high - low) / len(waiting)
        most = high + 1
        best_score, best = -1.0, [0]
        for host, queued in enumerate(waiting):
            if queued > band:
                continue
            score = (1.0 - kv[host]) + (1.0 - queued / most)
            if score > best_score:
                best_score, best = score, [host]
            elif score == best_score:
                best.append(host)
        return best[0] if len(best) == 1 else self._rng.choice(best)


class SharedQueue:
    """One FIFO in front of the fleet on fresh state, no staleness (the lower bound).

    A replica *can admit* the head when its batch (running + waiting) has room under
    ``max_num_seqs`` and its free KV blocks, after everything already waiting on it and the
    head's prompt, stay above the engine's admission watermark plus ``reserve`` (a share of its
    blocks): the engine then schedules the head in its very next iteration, as nothing waits
    for KV there. While no replica can admit the head, it waits in the shared queue (one queue
    for the whole fleet, so the first replica to free room serves it); a replica that is alone
    with nothing always can.

    Among the replicas that can admit it, the head goes to the one that will give it its first
    token soonest: the end of the iteration in progress plus the prefill of everything queued
    before it and of its own prompt, in iterations of the remaining token budget, divided by
    the replica's speed. With exact remaining prefill work this is the routing under which
    every request starts exactly when a central FCFS queue would start it. First-token times
    within one engine iteration of the best are not told apart; among those the replica whose
    decode iteration (with the head added) is fastest wins, which is the one with the most KV
    and batch headroom, speed-aware. Ties go to the lowest index, so runs are deterministic.
    """

    def __init__(self, *, reserve: float = 0.01, prefix_aware: bool = False) -> None:
        if not 0.0 <= reserve < 1.0:
            raise ValueError(f"reserve must be in [0, 1), got {reserve!r}")
        self._reserve = reserve
        self._prefix_aware = prefix_aware
        """Know every engine's prefix cache exactly (``ideal_prefix``): a cached prefix costs no
        prefill, and among near-equal first tokens the longest cached prefix wins. Without a
        hit every estimate is the plain queue's, so the two agree on such traffic."""
        self._queue: deque[int] = deque()
        self._fleet: Fleet | None = None

    def start(self, *, fleet: Fleet) -> None:
        self._fleet = fleet

    def on_arrival(self, *, request: int, now: float) -> None:
        self._queue.append(request)
        self._dispatch(now)

    def on_finish(self, *, request: int, host: int, now: float) -> None:
        self._dispatch(now)

    def _dispatch(self, now: float) -> None:
        fleet = self._fleet
        assert fleet is not None
        while self._queue:
            head = self._queue[0]
            host = self._choose(fleet=fleet, request=head, now=now)
            if host < 0:
                return
            self._queue.popleft()
            fleet.send(request=head, host=host, now=now)

    def _choose(self, *, fleet: Fleet, request: int, now: float) -> int:
        """The host for ``request``, or -1 when no replica can admit it now."""
        prompt, hashes = fleet.prompt_tokens[request], fleet.block_hashes[request]
        # (first token, one iteration there, -cached tokens, decode iteration, host).
        candidates: list[tuple[float, float, int, float, int]] = []
        for host, replica in enumerate(fleet.replicas):
            state = fleet.observe(host=host, now=now)
            profile = replica.profile
            batch = state.running + state.waiting
            if batch >= profile.max_num_seqs:
                continue
            cached = (
                replica.cached_prefix_tokens(block_hashes=hashes, prompt_tokens=prompt)
                if self._prefix_aware
                else 0
            )
            prefill = state.waiting_tokens + prompt - cached
            blocks = -(-prefill // profile.block_size)
            free = state.kv_blocks_total - state.kv_blocks_used
            floor = math.ceil((profile.watermark + self._reserve) * state.kv_blocks_total)
            if batch > 0 and free - blocks < floor:
                continue
            kv_tokens = state.kv_blocks_used * profile.block_size
            iteration = profile.step_time_s(seqs=batch + 1, kv_tokens=kv_tokens, prefill_tokens=0)
            budget = max(1, profile.max_num_batched_tokens - state.running)
            iterations = -(-prefill // budget)
            prefill_s = iterations * iteration + profile.step_per_prefill_token_s * prefill
            first = max(now, replica.now) + prefill_s / replica.speed
            decode = (
                profile.step_time_s(
                    seqs=batch + 1,
                    kv_tokens=kv_tokens + blocks * profile.block_size,
                    prefill_tokens=0,
                )
                / replica.speed
            )
            candidates.append((first, iteration / replica.speed, -cached, decode, host))
        if not candidates:
            return -1
        soonest, step = min(candidates)[:2]
        near = [c for c in candidates if c[0] <= soonest + step]
        return min((c[2], c[3], c[0], c[4]) for c in near)[3]
