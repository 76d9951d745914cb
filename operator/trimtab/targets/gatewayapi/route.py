"""Reading an HTTPRoute: find the rule, normalise its backendRefs, judge the gateways' status.

Pure functions over the route as JSON. ``status.parents[]`` is written by the gateways (one
entry per parent Gateway); trimtab reads ``Accepted`` and ``ResolvedRefs`` there and never
writes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trimtab.api.reasons import TargetReason
from trimtab.targets.base import TargetState
from trimtab.targets.gatewayapi.objects import RuleRef

__all__ = [
    "RefKey",
    "find_rule",
    "grant_allows",
    "last_rules_manager",
    "normalised_refs",
    "route_verdict",
    "rule_patch_ops",
]

RefKey = tuple[str, str, str, str, int | None, int]
"""(group, kind, namespace, name, port, weight) of one backendRef, defaults filled in."""


def find_rule(route: Mapping[str, Any], *, rule: RuleRef) -> int | None:
    """Index of the rule in ``spec.rules``, or ``None`` when the route has no such rule."""
    rules = route.get("spec", {}).get("rules") or []
    if rule.rule_name is not None:
        for index, entry in enumerate(rules):
            if entry.get("name") == rule.rule_name:
                return index
        return None
    return rule.rule_index if rule.rule_index < len(rules) else None


def describe_rules(route: Mapping[str, Any]) -> str:
    rules = route.get("spec", {}).get("rules") or []
    names = [entry.get("name") for entry in rules if entry.get("name")]
    return f"it has {len(rules)} rule(s)" + (f", named {', '.join(names)}" if names else "")


def normalised_refs(refs: Sequence[Mapping[str, Any]], *, namespace: str) -> list[RefKey]:
    """backendRefs with the CRD's defaults (group "", kind Service, weight 1, own namespace)."""
    return [
        (
            str(ref.get("group") or ""),
            str(ref.get("kind") or "Service"),
            str(ref.get("namespace") or namespace),
            str(ref.get("name", "")),
            ref.get("port"),
            int(ref.get("weight", 1)),
        )
        for ref in refs
    ]


def route_verdict(route: Mapping[str, Any], *, rule: RuleRef) -> TargetState:
    """What the route's parents say: Synced, a failure, or Pending until they observe it."""
    generation = route.get("metadata", {}).get("generation")
    parents = route.get("status", {}).get("parents") or []
    if not parents:
        return TargetState(
            False,
            TargetReason.PENDING,
            f"{rule.text}: no Gateway has reported on the route yet (check its parentRefs)",
        )
    stale = False
    for reason, wanted in (
        (TargetReason.ROUTE_NOT_ACCEPTED, "Accepted"),
        (TargetReason.BACKEND_REFS_NOT_RESOLVED, "ResolvedRefs"),
    ):
        for parent in parents:
            condition = _condition(parent, wanted)
            if condition is None:
                stale = True
                continue
            observed = condition.get("observedGeneration")
            if isinstance(generation, int) and isinstance(observed, int) and observed < generation:
                stale = True
                continue
            if condition.get("status") != "True":
                name = parent.get("parentRef", {}).get("name", "?")
                detail = condition.get("message") or ""
                message = (
                    f"{rule.text}: Gateway {name} says {wanted}=False"
                    f" ({condition.get('reason', '')}){': ' + detail if detail else ''}"
                )
                return TargetState(False, reason, message[:512])
    if stale:
        return TargetState(
            False,
            TargetReason.PENDING,
            f"{rule.text}: waiting for the Gateway(s) to observe generation {generation}",
        )
    names = ", ".join(sorted({str(p.get("parentRef", {}).get("name", "?")) for p in parents}))
    return TargetState(True, TargetReason.SYNCED, f"{rule.text} accepted by {names}")


def grant_allows(
    grants: Sequence[Mapping[str, Any]], *, from_namespace: str, services: Sequence[str]
) -> bool:
    """Whether ReferenceGrants (in the Services' namespace) let HTTPRoutes of
    ``from_namespace`` reference every one of ``services``."""

    def allows(grant: Mapping[str, Any], service: str) -> bool:
        spec = grant.get("spec", {})
        froms = spec.get("from") or []
        tos = spec.get("to") or []
        source = any(
            f.get("group") == "gateway.networking.k8s.io"
            and f.get("kind") == "HTTPRoute"
            and f.get("namespace") == from_namespace
            for f in froms
        )
        target = any(
            (t.get("group") or "") == ""
            and t.get("kind") == "Service"
            and t.get("name") in (None, "", service)
            for t in tos
        )
        return source and target

    return all(any(allows(grant, service) for grant in grants) for service in services)


def last_rules_manager(route: Mapping[str, Any], *, ours: str) -> str | None:
    """The field manager other than ``ours`` that last wrote ``spec.rules``, if recorded."""
    latest: tuple[str, str] | None = None
    for entry in route.get("metadata", {}).get("managedFields") or []:
        manager = entry.get("manager")
        fields = entry.get("fieldsV1", {}).get("f:spec", {})
        if manager and manager != ours and "f:rules" in fields:
            when = str(entry.get("time", ""))
            if latest is None or when >= latest[0]:
                latest = (when, str(manager))
    return latest[1] if latest else None


def rule_patch_ops(
    route: Mapping[str, Any],
    *,
    index: int,
    refs: Sequence[Mapping[str, Any]],
    annotations: Mapping[str, str | None],
) -> list[dict[str, Any]]:
    """A JSON patch (RFC 6902) that replaces only ``spec.rules[index].backendRefs`` of the
    route read as ``route``, and fails (a ``test``) if the route changed since."""
    meta = route.get("metadata", {})
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "add", "path": f"/spec/rules/{index}/backendRefs", "value": list(refs)},
    ]
    present = dict(meta.get("annotations") or {})
    added = {k: v for k, v in annotations.items() if v is not None}
    if added and "annotations" not in meta:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": added})
    else:
        for key, value in added.items():
            ops.append(
                {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
            )
    for key, removed in annotations.items():
        if removed is None and key in present:
            ops.append({"op": "remove", "path": f"/metadata/annotations/{_pointer(key)}"})
    return ops


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _condition(parent: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for condition in parent.get("conditions") or []:
        if condition.get("type") == kind:
            return condition  # type: ignore[no-any-return]
    return None
