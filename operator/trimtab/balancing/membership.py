"""Who is in a pool: Ready pods matching its selector, or its static endpoints.

Pods arrive as raw JSON from a watch (kopf's index in a cluster); :func:`pod_record` keeps
only what the loop needs and drops pods that cannot take traffic (not Ready, terminating, no
IP). :func:`select_members` applies a pool's selector and port. Everything here is pure.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from trimtab.api.records import Endpoint, PodName
from trimtab.api.spec import InferencePoolSpec, LabelSelector, SelectorOperator
from trimtab.api.times import parse_time

__all__ = [
    "Member",
    "MembershipProvider",
    "PodRecord",
    "RawPod",
    "StaticMembership",
    "pod_record",
    "ready_for_s",
    "select_members",
    "selector_matches",
]


class RawPodCondition(TypedDict, total=False):
    type: str
    status: str
    lastTransitionTime: str


class RawPodStatus(TypedDict, total=False):
    podIP: str
    conditions: list[RawPodCondition]


class RawPodMeta(TypedDict, total=False):
    name: str
    namespace: str
    labels: dict[str, str]
    deletionTimestamp: str


class RawPod(TypedDict, total=False):
    metadata: RawPodMeta
    status: RawPodStatus


@dataclass(frozen=True, kw_only=True)
class PodRecord:
    """A Ready, non-terminating pod with an IP: a candidate member of some pool."""

    name: str
    namespace: str
    ip: str
    labels: Mapping[str, str] = field(default_factory=dict)
    ready_since: datetime.datetime | None = None
    """When the Ready condition last turned True; ``None`` if the kubelet did not say."""


@dataclass(frozen=True, kw_only=True)
class Member:
    """A pool member at one instant: where it serves and since when it is Ready."""

    endpoint: Endpoint
    ready_since: datetime.datetime | None = None
    """``None`` for static endpoints and unknown times: treated as Ready for ever."""


class MembershipProvider(Protocol):
    """The current members of one pool; called once per loop tick, must not block."""

    def members(self, *, spec: InferencePoolSpec) -> Sequence[Member]: ...


class StaticMembership:
    """Members from ``spec.endpoints`` (local mode, and pools outside Kubernetes)."""

    def members(self, *, spec: InferencePoolSpec) -> Sequence[Member]:
        return select_members(spec=spec, pods=())


def pod_record(raw: Mapping[str, Any]) -> PodRecord | None:
    """The pod as a member candidate, or ``None`` when it cannot take traffic now."""
    pod: RawPod = raw  # type: ignore[assignment]  # the K8s edge: trust the shape, check values
    meta = pod.get("metadata", {})
    status = pod.get("status", {})
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return None
    ready = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return None
    return PodRecord(
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        ip=status["podIP"],
        labels=dict(meta.get("labels", {})),
        ready_since=parse_time(ready.get("lastTransitionTime")),
    )


def selector_matches(*, selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """``metav1.LabelSelector`` semantics: every matchLabels pair and every expression holds."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    for expression in selector.match_expressions:
        present = expression.key in labels
        value = labels.get(expression.key)
        match expression.operator:
            case SelectorOperator.IN:
                ok = present and value in expression.values
            case SelectorOperator.NOT_IN:
                ok = not present or value not in expression.values
            case SelectorOperator.EXISTS:
                ok = present
            case SelectorOperator.DOES_NOT_EXIST:
                ok = not present
        if not ok:
            return False
    return True


def select_members(*, spec: InferencePoolSpec, pods: Iterable[PodRecord]) -> list[Member]:
    """The pool's members, sorted by name so decisions and status are stable."""
    if spec.endpoints is not None:
        return [
            Member(endpoint=Endpoint(name=PodName(e.name), address=e.address, port=e.port))
            for e in sorted(spec.endpoints, key=lambda e: e.name)
        ]
    if spec.selector is None:
        return []
    port = spec.target_ports[0].number
    chosen = [pod for pod in pods if selector_matches(selector=spec.selector, labels=pod.labels)]
    return [
        Member(
            endpoint=Endpoint(name=PodName(pod.name), address=pod.ip, port=port),
            ready_since=pod.ready_since,
        )
        for pod in sorted(chosen, key=lambda pod: pod.name)
    ]


def ready_for_s(*, member: Member, now: datetime.datetime) -> float:
    """Seconds the member has been Ready; ``inf`` when unknown (no slow start for it)."""
    if member.ready_since is None:
        return math.inf
    return max(0.0, (now - member.ready_since).total_seconds())
