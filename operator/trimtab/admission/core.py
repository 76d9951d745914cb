"""The admission core: exact per-pod in-flight slots and one shared queue.

A slot is taken when a request is granted and given back exactly once, by :meth:`release`
(releasing twice, or an id never granted, does nothing). A pod takes a request only while it
accepts work, holds fewer than ``cap`` requests, and, when its KV snapshot is fresh and its KV
size known, its estimated KV use with the request's footprint (prompt + expected output tokens)
stays under ``kv_limit`` (:mod:`trimtab.admission.pods`). Stale or missing KV metrics fail open to
the count cap alone: they never make a pod look full. An empty pod takes any request, so a
footprint larger than every pod's budget waits for an idle pod instead of forever.

Among the pods that may take a request, the best is the one with the fewest requests in flight
per unit of speed, then the most KV headroom, then the smallest name; the next ones, up to
``max_fallbacks``, become its fallbacks. With prefix affinity on, a pod among those expected to
hold the request's prompt prefix or session may go first instead, within the load guard of
:mod:`trimtab.admission.affinity`; every grant says why its pod (:class:`PickReason`, counted in
the stats).

Requests that find no pod wait in one shared queue (priority classes, FIFO inside each; see
:mod:`trimtab.admission.queueing`). Whenever capacity may have appeared (a release, a new pod
set, new settings, :meth:`dispatch`) the queue is served in order: each pod serves the waiting
requests allowed on it in queue order, so a request never passes one ahead of it that could use
the same pod. In particular a smaller request never overtakes a head that waits for KV room;
only a head whose subset hint excludes a pod lets later requests use that pod. Up to
``_LOOKAHEAD`` such subset-bound requests are looked past per dispatch (bounding its cost); a
request waiting for any pod stops it.

:meth:`withdraw` and :meth:`expire` only remove requests; a caller whose timer runs them should
call :meth:`dispatch` afterwards, as a removed head may unblock the queue (a release or pod
update dispatches anyway).

Cost: ``ask`` and ``release`` are O(log pods) when a pod passes early, O(pods) at worst (every
pod full for the request's KV footprint), plus O(|subset|) with a subset hint; ``set_pods`` is
O(pods + in-flight). Memory: the pod set, one record per in-flight request, one per queued
request (bounded by ``queue_length``; ``benchmarks/bench_admission.py`` measures about 370 bytes
per queued request, the Ask included) and, per pod, the releases of the last ``stale_after_s``
seconds (needed to place a newer KV snapshot).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence, Set

from trimtab.admission.affinity import Affinity, Choice
from trimtab.admission.choosing import PodIndex, best_of
from trimtab.admission.pods import Flight, PodState
from trimtab.admission.queueing import WaitingQueue
from trimtab.admission.records import (
    AdmissionStats,
    Ask,
    Grant,
    PickReason,
    PodCapacity,
    PodStats,
    Queued,
    Refusal,
    RefusalReason,
    RequestId,
)
from trimtab.admission.settings import AdmissionSettings, AffinityMode
from trimtab.api.records import PodName
from trimtab.errors import SpecInvalid

__all__ = ["Admission"]

_LOOKAHEAD = 32
"""Subset-bound requests a dispatch looks past before it stops."""

_NOTHING: frozenset[str] = frozenset()


class Admission:
    """Per-pod in-flight caps, a KV-token budget and one shared queue, for one pool.

    Pure and single-threaded: time comes in as ``now`` (seconds on one monotonic clock) and every
    answer is returned, never sent. Invalid input raises :class:`trimtab.errors.SpecInvalid`.
    """

    def __init__(self, *, settings: AdmissionSettings) -> None:
        _check_type(settings, AdmissionSettings, "settings")
        self._settings = settings
        self._pods: dict[PodName, PodState] = {}
        self._by_address: dict[str, PodState] = {}
        self._index = PodIndex()
        self._largest_kv: int | None = None
        self._queue = WaitingQueue(classes=settings.priority_classes)
        self._flights: dict[RequestId, Flight] = {}
        self._asked = 0
        self._granted = 0
        self._queued = 0
        self._refused = dict.fromkeys(RefusalReason, 0)
        self._withdrawn = 0
        self._released = 0
        self._forgotten = 0
        self._picks = dict.fromkeys(PickReason, 0)
        self._hit_tokens = 0
        self._affinity = _affinity_for(settings, None)

    @property
    def settings(self) -> AdmissionSettings:
        return self._settings

    def configure(self, *, settings: AdmissionSettings, now: float) -> list[Grant | Refusal]:
        """Take new settings; a shorter queue refuses its newest requests (429)."""
        _check_type(settings, AdmissionSettings, "settings")
        _check_now(now)
        self._settings = settings
        affinity = _affinity_for(settings, self._affinity)
        if affinity is not None and affinity is not self._affinity:
            affinity.set_pods(pods=self._pods.values())
        self._affinity = affinity
        if settings.priority_classes != self._queue.classes:
            self._queue.reclass(classes=settings.priority_classes)
        results: list[Grant | Refusal] = []
        while len(self._queue) > settings.queue_length:
            newest = self._queue.pop_newest()
            results.append(self._refuse(newest.ask.id, RefusalReason.QUEUE_FULL))
        results.extend(self._dispatch(now=now))
        return results

    def set_pods(self, *, pods: Sequence[PodCapacity], now: float) -> list[Grant | Refusal]:
        """Replace the pod set (in-flight counts follow the pod's name).

        Later duplicates of a name or an address are ignored. Requests in flight on a pod that
        left are forgotten (their release is a no-op); queued requests no remaining pod may
        serve are refused (503); then the queue is served.
        """
        _check_now(now)
        for capacity in pods:
            _check_type(capacity, PodCapacity, "pod")
        stale_after_s = self._settings.stale_after_s
        fresh: dict[PodName, PodState] = {}
        by_address: dict[str, PodState] = {}
        for capacity in pods:
            if capacity.name in fresh or capacity.address in by_address:
                continue
            state = self._pods.get(capacity.name)
            if state is None:
                state = PodState(capacity=capacity)
            else:
                state.refresh(capacity=capacity, now=now, stale_after_s=stale_after_s)
            state.rekey()
            fresh[capacity.name] = state
            by_address[capacity.address] = state
        for name, state in self._pods.items():
            if name not in fresh:
                for id in state.flights:
                    del self._flights[id]
                self._forgotten += len(state.flights)
        address_lost = any(address not in by_address for address in self._by_address)
        self._pods = fresh
        self._by_address = by_address
        self._index.rebuild(pods=fresh)
        self._largest_kv = _largest_kv(fresh.values())
        if self._affinity is not None:
            self._affinity.set_pods(pods=fresh.values())
        results: list[Grant | Refusal] = []
        if not fresh or (address_lost and self._queue.restricted):
            for waiting in list(self._queue):
                subset = waiting.ask.subset
                if not fresh or (subset is not None and subset.isdisjoint(by_address)):
                    self._queue.remove(waiting.ask.id)
                    results.append(self._refuse(waiting.ask.id, RefusalReason.NO_ENDPOINT))
        results.extend(self._dispatch(now=now))
        return results

    def ask(self, *, ask: Ask, now: float) -> Grant | Queued | Refusal:
        """Grant a pod now, queue the request, or refuse it.

        Asking again with the id of a request granted or queued returns its current answer and
        changes nothing.
        """
        _check_type(ask, Ask, "ask")
        _check_now(now)
        flight = self._flights.get(ask.id)
        if flight is not None:
            return flight.grant
        if self._queue and ask.id in self._queue:
            return Queued(id=ask.id, position=self._queue.position(ask.id) or 0)
        self._asked += 1
        candidates = self._candidates(ask.subset)
        if candidates is None:
            if not self._pods:
                return self._refuse(ask.id, RefusalReason.NO_ENDPOINT)
            largest = self._largest_kv
        else:
            if not candidates:
                return self._refuse(ask.id, RefusalReason.NO_ENDPOINT)
            largest = _largest_kv(candidates)
        if largest is not None and ask.prompt_tokens > largest:
            return self._refuse(ask.id, RefusalReason.TOO_LARGE)
        footprint = ask.prompt_tokens + self._settings.expected_output_tokens
        everything, claimed = (
            self._queue.ahead_of(priority=ask.priority) if self._queue else (False, _NOTHING)
        )
        if not everything:
            chosen = self._choose(ask, candidates, footprint=footprint, excluded=claimed, now=now)
            if chosen is not None:
                return self._grant(ask, footprint=footprint, chosen=chosen, now=now)
        if len(self._queue) >= self._settings.queue_length:
            return self._refuse(ask.id, RefusalReason.QUEUE_FULL)
        self._queued += 1
        return Queued(id=ask.id, position=self._queue.add(ask=ask, footprint=footprint, now=now))

    def release(
        self, *, id: RequestId, now: float, output_tokens: int | None = None
    ) -> list[Grant]:
        """The request ended, however it ended: free its slot and serve the queue.

        ``output_tokens``, when known, corrects the KV estimate (otherwise the expected output
        is assumed); a value that is not an integer >= 0 is ignored, so a release never fails.
        Releasing an unknown or already released id does nothing; releasing a queued one
        withdraws it.
        """
        _check_now(now)
        flight = self._flights.pop(id, None)
        if flight is None:
            if self._queue.remove(id) is None:
                return []
            self._withdrawn += 1
            return self._dispatch(now=now)
        valid = (
            isinstance(output_tokens, int)
            and not isinstance(output_tokens, bool)
            and output_tokens >= 0
        )
        pod = self._pods[flight.pod]
        pod.remove(
            flight=flight,
            now=now,
            output_tokens=output_tokens if valid else None,
            stale_after_s=self._settings.stale_after_s,
        )
        pod.rekey()
        self._index.update(pod)
        self._released += 1
        return self._dispatch(now=now)

    def moved(self, *, id: RequestId, address: str, now: float) -> list[Grant]:
        """The gateway served a granted request at ``address`` (a fallback), not its pod.

        The slot and KV estimate move there, even above that pod's cap (the request is there
        already); the freed slot serves the queue. Unknown ids or addresses, or the same pod,
        change nothing.
        """
        _check_now(now)
        flight = self._flights.get(id)
        target = self._by_address.get(address)
        if flight is None or target is None or target.capacity.name == flight.pod:
            return []
        source = self._pods[flight.pod]
        source.drop(flight)
        source.rekey()
        self._index.update(source)
        grant = Grant(id=id, pod=target.capacity.name, address=address, fallbacks=())
        moved = Flight(
            id=id,
            pod=target.capacity.name,
            prompt_tokens=flight.prompt_tokens,
            footprint=flight.footprint,
            granted_at=now,
            grant=grant,
        )
        self._flights[id] = moved
        target.add(moved)
        target.rekey()
        self._index.update(target)
        return self._dispatch(now=now)

    def withdraw(self, *, id: RequestId) -> None:
        """A queued request went away (client cancelled); unknown or granted ids are ignored."""
        if self._queue.remove(id) is not None:
            self._withdrawn += 1

    def expire(self, *, now: float) -> list[Refusal]:
        """Shed the queued requests that have waited ``queue_ttl_s`` or longer (429)."""
        _check_now(now)
        return [
            self._refuse(waiting.ask.id, RefusalReason.QUEUE_TIMEOUT)
            for waiting in self._queue.expire(now=now, ttl_s=self._settings.queue_ttl_s)
        ]

    def next_deadline(self) -> float | None:
        """The earliest ``now`` at which :meth:`expire` has work; None with an empty queue."""
        return self._queue.next_deadline(ttl_s=self._settings.queue_ttl_s)

    def dispatch(self, *, now: float) -> list[Grant]:
        """Serve the queue (after :meth:`withdraw` or :meth:`expire`, or as KV snapshots age)."""
        _check_now(now)
        return self._dispatch(now=now)

    def stats(self) -> AdmissionStats:
        return AdmissionStats(
            pods=tuple(
                PodStats(
                    name=pod.capacity.name,
                    address=pod.capacity.address,
                    in_flight=pod.in_flight,
                    cap=pod.capacity.cap,
                    accepting=pod.capacity.accepting,
                    kv_estimate=pod.kv_estimate(),
                    kv_observed_at=pod.capacity.kv_observed_at,
                )
                for pod in self._pods.values()
            ),
            queue_length=len(self._queue),
            queued_by_priority=self._queue.sizes(),
            asked=self._asked,
            granted=self._granted,
            queued=self._queued,
            refused=dict(self._refused),
            withdrawn=self._withdrawn,
            released=self._released,
            forgotten=self._forgotten,
            picks=dict(self._picks),
            hit_tokens=self._hit_tokens,
        )

    def _candidates(self, subset: frozenset[str] | None) -> list[PodState] | None:
        if subset is None:
            return None
        by_address = self._by_address
        return [by_address[address] for address in subset if address in by_address]

    def _choose(
        self,
        ask: Ask,
        candidates: list[PodState] | None,
        *,
        footprint: int,
        excluded: Set[str],
        now: float,
    ) -> Choice | None:
        kv_limit = self._settings.kv_limit
        stale_after_s = self._settings.stale_after_s

        def passes(pod: PodState) -> bool:
            if excluded and pod.capacity.address in excluded:
                return False
            return pod.fits(
                footprint=footprint, now=now, kv_limit=kv_limit, stale_after_s=stale_after_s
            )

        limit = 1 + self._settings.max_fallbacks
        if candidates is None:
            normal = self._index.best(passes=passes, limit=limit)
        else:
            normal = best_of(pods=candidates, passes=passes, limit=limit)
        if not normal:
            return None
        if self._affinity is None:
            return Choice(pods=normal, reason=PickReason.NORMAL, hit_tokens=0)
        return self._affinity.choose(
            ask=ask, normal=normal, pods=self._pods.get, admissible=passes, limit=limit
        )

    def _grant(self, ask: Ask, *, footprint: int, chosen: Choice, now: float) -> Grant:
        pod = chosen.pods[0]
        grant = Grant(
            id=ask.id,
            pod=pod.capacity.name,
            address=pod.capacity.address,
            fallbacks=tuple(other.capacity.address for other in chosen.pods[1:]),
            reason=chosen.reason,
            hit_tokens=chosen.hit_tokens,
        )
        flight = Flight(
            id=ask.id,
            pod=pod.capacity.name,
            prompt_tokens=ask.prompt_tokens,
            footprint=footprint,
            granted_at=now,
            grant=grant,
        )
        self._flights[ask.id] = flight
        pod.add(flight)
        pod.rekey()
        self._index.update(pod)
        self._granted += 1
        self._picks[chosen.reason] += 1
        self._hit_tokens += chosen.hit_tokens
        if self._affinity is not None:
            self._affinity.record(pod=pod.capacity.name, ask=ask)
        return grant

    def _dispatch(self, *, now: float) -> list[Grant]:
        if not self._queue or not self._pods:
            return []
        grants: list[Grant] = []
        excluded: set[str] = set()
        looked_past = 0
        for waiting in self._queue:
            ask = waiting.ask
            candidates = self._candidates(ask.subset)
            chosen = self._choose(
                ask, candidates, footprint=waiting.footprint, excluded=excluded, now=now
            )
            if chosen is not None:
                grants.append(self._grant(ask, footprint=waiting.footprint, chosen=chosen, now=now))
                continue
            if ask.subset is None:
                break
            excluded.update(ask.subset)
            looked_past += 1
            if looked_past >= _LOOKAHEAD:
                break
        for grant in grants:
            self._queue.remove(grant.id)
        return grants

    def _refuse(self, id: RequestId, reason: RefusalReason) -> Refusal:
        self._refused[reason] += 1
        retry = reason in {RefusalReason.QUEUE_FULL, RefusalReason.QUEUE_TIMEOUT}
        return Refusal(
            id=id,
            reason=reason,
            status=503 if reason is RefusalReason.NO_ENDPOINT else 429,
            retry_after_s=self._settings.retry_after_s if retry else None,
        )


def _affinity_for(settings: AdmissionSettings, current: Affinity | None) -> Affinity | None:
    """The affinity ``settings`` ask for: ``current`` while its blocks still mean the same."""
    if settings.affinity is AffinityMode.OFF:
        return None
    if current is not None and current.block_tokens == settings.affinity_block_tokens:
        current.load_factor = settings.affinity_load_factor
        return current
    return Affinity(
        block_tokens=settings.affinity_block_tokens, load_factor=settings.affinity_load_factor
    )


def _largest_kv(pods: Iterable[PodState]) -> int | None:
    """The biggest KV size among ``pods``, or None when one of them does not know its own."""
    largest = 0
    for pod in pods:
        size = pod.capacity.kv_capacity_tokens
        if size is None:
            return None
        largest = max(largest, size)
    return largest or None


def _check_type(value: object, kind: type, what: str) -> None:
    if not isinstance(value, kind):
        raise SpecInvalid([f"{what} must be a {kind.__name__}, got {type(value).__name__}"])


def _check_now(now: object) -> None:
    if isinstance(now, bool) or not isinstance(now, int | float) or not math.isfinite(now):
        raise SpecInvalid([f"now must be a finite number, got {now!r}"])
