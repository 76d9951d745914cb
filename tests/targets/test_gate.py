"""The xDS ready gate: closed until every known pool has decided once, bounded by deadlines.

Aspects: with no pool known it opens after the grace period (pools not listed yet at
startup get that long); a known pool keeps it closed past the grace until it settles; a
pool that never settles cannot keep it closed past the deadline; once open it stays open.
Uses the real :class:`SnapshotCache` and a hand-moved clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from trimtab.api.records import PoolKey
from trimtab.targets.gate import XdsGate
from trimtab.targets.xds.cache import SnapshotCache

POOL = PoolKey("serving", "llama")
OTHER = PoolKey("serving", "mistral")


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def gate() -> tuple[XdsGate, SnapshotCache, Clock]:
    cache, clock = SnapshotCache(), Clock()
    return XdsGate(cache=cache, grace_s=2.0, deadline_s=30.0, clock=clock), cache, clock


def test_with_no_pool_known_it_opens_after_the_grace() -> None:
    xds, cache, clock = gate()
    clock.now = 1.9
    xds.check()
    assert not cache.ready
    clock.now = 2.0
    xds.check()
    assert cache.ready


def test_a_known_pool_keeps_it_closed_until_it_settles() -> None:
    xds, cache, clock = gate()
    xds.expect(POOL)
    xds.expect(OTHER)
    clock.now = 5.0
    xds.settle(POOL)
    assert not cache.ready
    xds.settle(OTHER)
    assert cache.ready


def test_settling_within_the_grace_waits_for_the_grace() -> None:
    xds, cache, clock = gate()
    xds.expect(POOL)
    clock.now = 0.5
    xds.settle(POOL)
    assert not cache.ready
    clock.now = 2.0
    xds.check()
    assert cache.ready


def test_a_pool_that_never_settles_cannot_hold_it_past_the_deadline() -> None:
    xds, cache, clock = gate()
    xds.expect(POOL)
    clock.now = 29.9
    xds.check()
    assert not cache.ready
    clock.now = 30.0
    xds.check()
    assert cache.ready


def test_once_open_a_new_pool_does_not_close_it() -> None:
    xds, cache, clock = gate()
    clock.now = 2.0
    xds.check()
    xds.expect(POOL)
    xds.check()
    assert cache.ready
    assert cache.current() is not None
