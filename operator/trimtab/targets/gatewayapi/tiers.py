"""Group a pool's pods into at most ``tiers`` weight tiers of similar weight.

With no more pods than tiers every pod is its own tier, so the gateway gets the pool's
weights exactly. Otherwise the pods, sorted by weight, are cut into contiguous groups with the
least within-group squared spread (one-dimensional k-means, solved exactly by dynamic
programming with the divide-and-conquer speed-up: O(tiers · n log n)). Every pod of a tier gets
the tier's mean weight, and the tier's backend weight is the sum of its pods' weights, so the
tier's share of traffic is exactly its pods' share.

Moving a pod costs API writes and a gateway re-translation, so an existing grouping is kept
while it is nearly as good as the best one (see :data:`REGROUP_FACTOR`), and tiers keep their
slot (hence their Service) across regroupings by largest overlap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trimtab.api.records import PodName

__all__ = ["MAX_BACKEND_WEIGHT", "MAX_TIERS", "REGROUP_FACTOR", "Tier", "group_pods"]

MAX_TIERS = 16
"""backendRefs per HTTPRoute rule (``maxItems`` in the CRD)."""
MAX_BACKEND_WEIGHT = 1_000_000
"""Largest ``backendRefs[].weight`` the CRD accepts."""
REGROUP_FACTOR = 1.25
"""The current grouping is kept while its within-tier squared spread is at most this times the
best grouping's (plus a floor of 1 % of the mean weight per pod, so equal weights never
regroup)."""


@dataclass(frozen=True)
class Tier:
    """One backend of the rule: a slot (its Service), its pods and its backendRef weight."""

    slot: int
    pods: tuple[PodName, ...]
    """Sorted by name."""
    weight: int
    """backendRef weight, 1..1,000,000: the sum of the pods' weights, scaled down if needed."""


def group_pods(
    weights: Mapping[PodName, int],
    *,
    tiers: int,
    previous: Sequence[Tier] = (),
) -> tuple[Tier, ...]:
    """The tiers for ``weights`` (pod → weight > 0), reusing ``previous`` where it is good."""
    if not 1 <= tiers <= MAX_TIERS:
        raise ValueError(f"tiers must be 1..{MAX_TIERS}, got {tiers}")
    if not weights:
        return ()
    if len(weights) <= tiers:
        groups = [[pod] for pod in weights]
    else:
        best = _best_groups(weights, k=tiers)
        kept = _kept_groups(weights, previous=previous, tiers=tiers)
        floor = len(weights) * (0.01 * sum(weights.values()) / len(weights)) ** 2
        use_kept = kept is not None and _spread(weights, kept) <= (
            REGROUP_FACTOR * _spread(weights, best) + floor
        )
        groups = kept if use_kept and kept is not None else best
    return _as_tiers(weights, groups=groups, previous=previous, tiers=tiers)


def _best_groups(weights: Mapping[PodName, int], *, k: int) -> list[list[PodName]]:
    pods = sorted(weights, key=lambda p: (weights[p], p))
    values = [float(weights[p]) for p in pods]
    n = len(values)
    sums = [0.0]
    squares = [0.0]
    for v in values:
        sums.append(sums[-1] + v)
        squares.append(squares[-1] + v * v)

    def cost(i: int, j: int) -> float:
        """Squared spread of values[i:j]."""
        s = sums[j] - sums[i]
        return squares[j] - squares[i] - s * s / (j - i)

    # best[m]: least cost of the first m values in the current number of groups.
    best = [math.inf] + [cost(0, m) for m in range(1, n + 1)]
    cuts: list[list[int]] = [[0] * (n + 1)]
    for _ in range(1, k):
        nxt = [math.inf] * (n + 1)
        cut = [0] * (n + 1)
        # Divide and conquer: the best cut of prefix m never decreases with m.
        pending = [(1, n, 0, n - 1)]
        while pending:
            lo, hi, opt_lo, opt_hi = pending.pop()
            if lo > hi:
                continue
            mid = (lo + hi) // 2
            chosen, value = opt_lo, math.inf
            for c in range(opt_lo, min(mid - 1, opt_hi) + 1):
                candidate = best[c] + cost(c, mid)
                if candidate < value:
                    chosen, value = c, candidate
            nxt[mid], cut[mid] = value, chosen
            pending.append((lo, mid - 1, opt_lo, chosen))
            pending.append((mid + 1, hi, chosen, opt_hi))
        best = nxt
        cuts.append(cut)
    bounds = [n]
    for level in range(k - 1, 0, -1):
        bounds.append(cuts[level][bounds[-1]])
    bounds.append(0)
    bounds.reverse()
    return [pods[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def _kept_groups(
    weights: Mapping[PodName, int], *, previous: Sequence[Tier], tiers: int
) -> list[list[PodName]] | None:
    """The previous grouping with departed pods dropped and new pods in the nearest tier."""
    groups = [[p for p in tier.pods if p in weights] for tier in previous]
    groups = [g for g in groups if g]
    if not groups or len(groups) > tiers:
        return None
    placed = {p for g in groups for p in g}
    means = [sum(weights[p] for p in g) / len(g) for g in groups]
    for pod in sorted(p for p in weights if p not in placed):
        nearest = min(range(len(groups)), key=lambda i: (abs(means[i] - weights[pod]), i))
        groups[nearest].append(pod)
    return groups


def _spread(weights: Mapping[PodName, int], groups: Sequence[Sequence[PodName]]) -> float:
    total = 0.0
    for group in groups:
        mean = sum(weights[p] for p in group) / len(group)
        total += sum((weights[p] - mean) ** 2 for p in group)
    return total


def _as_tiers(
    weights: Mapping[PodName, int],
    *,
    groups: Sequence[Sequence[PodName]],
    previous: Sequence[Tier],
    tiers: int,
) -> tuple[Tier, ...]:
    # Slots follow the largest overlap with the previous tiers, so Services are reused.
    pairs = sorted(
        (
            (-len(set(group) & set(tier.pods)), tier.slot, index)
            for index, group in enumerate(groups)
            for tier in previous
            if set(group) & set(tier.pods)
        ),
    )
    slot_of: dict[int, int] = {}
    taken: set[int] = set()
    for _, slot, index in pairs:
        if index not in slot_of and slot not in taken and slot < tiers:
            slot_of[index] = slot
            taken.add(slot)
    free = iter(s for s in range(tiers) if s not in taken)
    for index in range(len(groups)):
        if index not in slot_of:
            slot_of[index] = next(free)
    sums = [sum(weights[p] for p in group) for group in groups]
    scale = min(1.0, MAX_BACKEND_WEIGHT / max(sums))
    built = [
        Tier(
            slot=slot_of[index],
            pods=tuple(sorted(group)),
            weight=max(1, min(MAX_BACKEND_WEIGHT, round(total * scale))),
        )
        for index, (group, total) in enumerate(zip(groups, sums, strict=True))
    ]
    return tuple(sorted(built, key=lambda t: t.slot))
