"""Per-pod accounting: in-flight slots and the KV-token estimate between snapshots.

A pod's KV estimate, in tokens, is its last snapshot plus the footprint (prompt + expected
output) of every request granted since the snapshot, minus what the requests released since
the snapshot held: the footprint added for one granted after it, or prompt + output (the real
output when the release says it, else the expected one) for one the snapshot already saw. It is
trusted only while the snapshot is fresh; stale or missing KV metrics fall back to the count cap
alone (fail open).

Mutable on purpose: these are the admission core's private working state, changed in place on
every grant and release so that neither allocates more than a few small objects.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from trimtab.admission.records import Grant, PodCapacity, RequestId
from trimtab.api.records import PodName

__all__ = ["Flight", "PodState", "SortKey"]

SortKey = tuple[float, float, PodName]
"""(in-flight per unit of speed, estimated KV fraction, name): the smallest is the best pod."""


@dataclass(slots=True, kw_only=True, eq=False)
class Flight:
    """A granted request holding one slot."""

    id: RequestId
    pod: PodName
    prompt_tokens: int
    footprint: int
    """Tokens added to the pod's estimate at grant: prompt + expected output."""
    granted_at: float
    grant: Grant
    """Returned again when the same id asks twice."""


@dataclass(slots=True, kw_only=True, eq=False)
class PodState:
    capacity: PodCapacity
    in_flight: int = 0
    flights: dict[RequestId, Flight] = field(default_factory=dict)
    delta_tokens: int = 0
    """Tokens granted minus tokens released since the snapshot (see the module docstring)."""
    committed_tokens: int = 0
    """Footprints of every request in flight here. A snapshot counts only KV already
    allocated: a long prompt still waiting or prefilling in the engine is missing from it, and
    once the snapshot is newer than its grant it would drop out of the estimate too. This
    floor keeps it in until it ends."""
    releases: deque[tuple[float, float, int]] = field(default_factory=deque)
    """(released_at, granted_at, tokens held) of releases after the snapshot, so that a newer
    snapshot can be given its own delta; kept for ``stale_after_s`` at most."""
    version: int = 0
    """Bumped whenever ``key`` changes, so outdated index entries can be told apart."""
    key: SortKey = (0.0, 0.0, PodName(""))

    @property
    def has_room(self) -> bool:
        return self.capacity.accepting and self.in_flight < self.capacity.cap

    def estimate_fraction(self) -> float:
        """KV use estimated from the last snapshot (fresh or not), 0 when unknown."""
        usage = self.capacity.kv_usage
        size = self.capacity.kv_capacity_tokens
        if usage is None:
            return 0.0
        if size is None:
            return usage
        return max(0.0, usage * size + self.delta_tokens, self.committed_tokens) / size

    def kv_estimate(self) -> float | None:
        if self.capacity.kv_usage is None or self.capacity.kv_capacity_tokens is None:
            return None
        return self.estimate_fraction()

    def fits(self, *, footprint: int, now: float, kv_limit: float, stale_after_s: float) -> bool:
        """Whether a request of ``footprint`` tokens keeps the estimate under ``kv_limit``.

        An empty pod takes any request (a footprint above every pod's budget must not wait
        forever), and a pod without a fresh snapshot or a known KV size is judged by its count
        cap alone.
        """
        usage = self.capacity.kv_usage
        size = self.capacity.kv_capacity_tokens
        observed_at = self.capacity.kv_observed_at
        if self.in_flight == 0 or usage is None or size is None or observed_at is None:
            return True
        if now - observed_at > stale_after_s:
            return True
        used = max(usage * size + self.delta_tokens, self.committed_tokens)
        return used + footprint < kv_limit * size

    def rekey(self) -> None:
        self.version += 1
        self.key = (
            self.in_flight / self.capacity.speed,
            self.estimate_fraction(),
            self.capacity.name,
        )

    def _since_snapshot(self, granted_at: float) -> bool:
        # A grant at the very instant of the snapshot has not reached the engine yet.
        observed_at = self.capacity.kv_observed_at
        return observed_at is None or granted_at >= observed_at

    def add(self, flight: Flight) -> None:
        self.flights[flight.id] = flight
        self.in_flight += 1
        self.committed_tokens += flight.footprint
        if self._since_snapshot(flight.granted_at):
            self.delta_tokens += flight.footprint

    def remove(
        self, *, flight: Flight, now: float, output_tokens: int | None, stale_after_s: float
    ) -> None:
        del self.flights[flight.id]
        self.in_flight -= 1
        self.committed_tokens -= flight.footprint
        held = flight.footprint if output_tokens is None else flight.prompt_tokens + output_tokens
        if self._since_snapshot(flight.granted_at):
            self.delta_tokens -= flight.footprint
        else:
            self.delta_tokens -= held
        self.releases.append((now, flight.granted_at, held))
        self._trim(older_than=now - stale_after_s)

    def drop(self, flight: Flight) -> None:
        """Take back a request that never ran here (the gateway served it elsewhere)."""
        del self.flights[flight.id]
        self.in_flight -= 1
        self.committed_tokens -= flight.footprint
        if self._since_snapshot(flight.granted_at):
            self.delta_tokens -= flight.footprint

    def refresh(self, *, capacity: PodCapacity, now: float, stale_after_s: float) -> None:
        """Take the pod's new capacity; a newer KV snapshot gets its own delta.

        A snapshot older than the one held is ignored (metrics do not travel back in time; a
        reordered scrape must not undo what a newer one said).
        """
        old_at = self.capacity.kv_observed_at
        new_at = capacity.kv_observed_at
        if new_at is not None and old_at is not None and new_at < old_at:
            capacity = _with_snapshot_of(capacity, self.capacity)
        self.capacity = capacity
        if new_at is not None and new_at != old_at and capacity.kv_observed_at == new_at:
            self._trim(older_than=new_at)
            self.delta_tokens = sum(
                f.footprint for f in self.flights.values() if f.granted_at >= new_at
            ) - sum(held for _, granted_at, held in self.releases if granted_at < new_at)
        self._trim(older_than=now - stale_after_s)

    def _trim(self, *, older_than: float) -> None:
        releases = self.releases
        while releases and releases[0][0] <= older_than:
            releases.popleft()


def _with_snapshot_of(capacity: PodCapacity, previous: PodCapacity) -> PodCapacity:
    return PodCapacity(
        name=capacity.name,
        address=capacity.address,
        cap=capacity.cap,
        accepting=capacity.accepting,
        speed=capacity.speed,
        kv_usage=previous.kv_usage,
        kv_observed_at=previous.kv_observed_at,
        kv_capacity_tokens=capacity.kv_capacity_tokens,
    )
