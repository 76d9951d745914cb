"""The order of writes that moves a rule from its current tiers to the desired ones safely.

Invariant, at every intermediate state the API server (and so the gateway) can see: every
backendRef with weight > 0 names a Service that exists and has at least one endpoint, and the
rule's weights do not sum to 0 (both would be 500s or 503s for a share of the traffic). The
sequence, each step skipped when it changes nothing:

1. create the Services and EndpointSlices of new tiers (not yet referenced);
2. drain: weight 0 for every tier whose pods change or which goes away;
3. move: write the EndpointSlices of the tiers whose pods change (never empty: a kept tier
   always has pods);
4. re-weight: the final backendRefs, without the tiers that went away.

Tiers that went away are deleted only on a later apply, once the route read back no longer
names them, which gives the gateway time to stop using them. If draining would leave no
weight at all (every tier changes at once), the changing tiers keep their weights through the
move instead: their EndpointSlices are never empty, so that is still safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CreateTiers", "Layout", "MoveSlices", "Step", "WriteRefs", "plan_moves"]

Members = frozenset[str]
"""Endpoints of a tier (``ip:port`` strings); only their identity matters here."""


@dataclass(frozen=True)
class Layout:
    """What the gateway sees of a rule: backend weights and the endpoints of trimtab's tiers.

    ``refs`` maps backend Service name → weight, in rule order; names absent from ``tiers``
    are backends trimtab does not own (e.g. the user's own Service before trimtab took over);
    they are assumed to serve and are never emptied by trimtab.
    """

    refs: Mapping[str, int]
    tiers: Mapping[str, Members]


@dataclass(frozen=True)
class CreateTiers:
    tiers: Mapping[str, Members]


@dataclass(frozen=True)
class WriteRefs:
    refs: Mapping[str, int]


@dataclass(frozen=True)
class MoveSlices:
    tiers: Mapping[str, Members]


Step = CreateTiers | WriteRefs | MoveSlices


def plan_moves(*, current: Layout, desired: Layout) -> list[Step]:
    """The steps from ``current`` to ``desired`` (whose refs are exactly its tiers)."""
    steps: list[Step] = []
    new = {name: pods for name, pods in desired.tiers.items() if name not in current.tiers}
    if new:
        steps.append(CreateTiers(new))
    changed = {
        name: pods
        for name, pods in desired.tiers.items()
        if name in current.tiers and current.tiers[name] != pods
    }
    going = {name for name in current.tiers if name not in desired.tiers}
    refs = dict(current.refs)
    drained = {
        name: (0 if name in going or name in changed else weight) for name, weight in refs.items()
    }
    if sum(drained.values()) == 0:
        drained = {name: (0 if name in going else weight) for name, weight in refs.items()}
    if sum(drained.values()) == 0:
        # Nothing trimtab keeps serves yet: start the new tiers at their final weights.
        drained.update({name: desired.refs[name] for name in new})
    if drained != refs:
        steps.append(WriteRefs(drained))
        refs = drained
    if changed:
        steps.append(MoveSlices(changed))
    final = dict(desired.refs)
    if list(final.items()) != list(refs.items()):
        steps.append(WriteRefs(final))
    return steps
