"""The gatewayAPI target: drives tiers, objects and moves through a :class:`GatewayAPIWriter`.

Each apply reads the route, checks the rule and (for a route in another namespace) the
ReferenceGrant, groups the pods into tiers, plans the safe move sequence and executes it,
deletes the tiers the route no longer names, and reads the gateways' verdict back.

Why no server-side apply: ``spec.rules`` of HTTPRoute is ``x-kubernetes-list-type: atomic``
(so is ``backendRefs``), so a field manager can only own the whole rules list; applying one
rule would either conflict with the route's owner or, forced, wipe the other rules. The writer
therefore patches ``/spec/rules/<i>/backendRefs`` with a JSON patch whose first operation
tests ``metadata.resourceVersion``: read-modify-write that fails, instead of losing someone
else's change, when the route changed since it was read.

A writer that keeps replacing the rule's backendRefs (a GitOps tool syncing the manifest,
another controller) is detected by comparing what the route holds with what trimtab wrote
last: after :data:`CONTESTED_AFTER` overwrites in a row the target reports
``RouteContested`` (and so backs off), still restoring its backendRefs on each retry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import GatewayAPITarget, InferencePoolSpec
from trimtab.errors import KubeConflict, TargetSyncError
from trimtab.targets.base import TargetState
from trimtab.targets.gatewayapi import objects
from trimtab.targets.gatewayapi.moves import (
    CreateTiers,
    Layout,
    MoveSlices,
    WriteRefs,
    plan_moves,
)
from trimtab.targets.gatewayapi.objects import Owner, RuleRef, TierNames
from trimtab.targets.gatewayapi.route import (
    RefKey,
    describe_rules,
    find_rule,
    grant_allows,
    last_rules_manager,
    normalised_refs,
    route_verdict,
    rule_patch_ops,
)
from trimtab.targets.gatewayapi.tiers import Tier, group_pods

__all__ = [
    "CONTESTED_AFTER",
    "FIELD_MANAGER",
    "GatewayAPITierTarget",
    "GatewayAPIWriter",
    "OwnedObjects",
    "gateway_api_target_name",
]

FIELD_MANAGER = "trimtab"
CONTESTED_AFTER = 3
"""Overwrites in a row of trimtab's backendRefs before the route counts as contested."""
ORIGINAL_REFS_ANNOTATION = "trimtab.io/original-backend-refs-"
"""+ the rule key: the backendRefs the rule had when trimtab took it; restored on removal."""


@dataclass(frozen=True)
class OwnedObjects:
    """This target's Services and EndpointSlices as listed (label-filtered by the writer)."""

    services: Sequence[Mapping[str, Any]] = ()
    slices: Sequence[Mapping[str, Any]] = ()


class GatewayAPIWriter(Protocol):
    """The API calls of the gatewayAPI target; ``trimtab.kube`` implements it.

    Errors are :class:`TargetSyncError` (with a :class:`TargetReason`), except a failed
    route precondition, which is :class:`~trimtab.errors.KubeConflict`.
    """

    async def pool_uid(self, *, pool: PoolKey) -> str:
        """uid of the trimtab InferencePool (for ownerReferences)."""
        ...

    async def get_route(self, *, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The HTTPRoute, or ``None`` when it does not exist."""
        ...

    async def patch_route(
        self, *, namespace: str, name: str, ops: Sequence[Mapping[str, Any]]
    ) -> Mapping[str, Any]:
        """Send a JSON patch (field manager ``trimtab``); return the route after it. A failed
        ``test`` operation (the route changed since it was read) is a KubeConflict."""
        ...

    async def reference_grants(self, *, namespace: str) -> Sequence[Mapping[str, Any]]: ...

    async def list_owned(self, *, namespace: str, labels: Mapping[str, str]) -> OwnedObjects:
        """Services and EndpointSlices carrying all of ``labels``."""
        ...

    async def put(self, obj: Mapping[str, Any], *, labels: Mapping[str, str]) -> None:
        """Create ``obj``, or update the existing one only if it carries ``labels``
        (else :class:`TargetSyncError` with ``ObjectNotOwned``)."""
        ...

    async def delete(
        self, *, kind: str, namespace: str, name: str, labels: Mapping[str, str]
    ) -> None:
        """Delete the object if it exists and carries ``labels``."""
        ...


def gateway_api_target_name(spec: GatewayAPITarget) -> str:
    """``gatewayAPI:httproute/[<namespace>/]<route>/<rule name or #index>``."""
    ref = spec.http_route
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    rule = spec.rule_name or f"#{spec.rule_index or 0}"
    return f"gatewayAPI:httproute/{where}/{rule}"


class GatewayAPITierTarget:
    """One ``gatewayAPI`` entry of one pool."""

    def __init__(
        self,
        *,
        spec: GatewayAPITarget,
        write: GatewayAPIWriter,
        status_grace_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._spec = spec
        self._write = write
        self._grace_s = status_grace_s
        self._clock = clock
        self._owners: dict[PoolKey, Owner] = {}
        self._tiers: dict[PoolKey, tuple[Tier, ...]] = {}
        self._written: dict[PoolKey, list[RefKey]] = {}
        self._overwrites: dict[PoolKey, int] = {}
        self._pending_since: dict[PoolKey, float] = {}
        self._states: dict[PoolKey, TargetState] = {}

    @property
    def name(self) -> str:
        return gateway_api_target_name(self._spec)

    def state(self, *, pool: PoolKey) -> TargetState:
        return self._states.get(
            pool, TargetState(False, TargetReason.NOT_APPLIED, "no decision written yet")
        )

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        rule = RuleRef.of(pool=pool, spec=self._spec)
        names = TierNames(pool=pool, rule=rule)
        labels = objects.owned_labels(pool=pool, rule=rule)
        route, index = await self._route(rule=rule)
        owner = await self._owner(pool)
        weights = {
            pod.name: pod.weight
            for pod in decision.pods
            if pod.name in endpoints and pod.weight > 0
        }
        tiers = group_pods(
            weights, tiers=self._tier_count(spec), previous=self._tiers.get(pool, ())
        )
        services = {tier.slot: names.service(tier.slot) for tier in tiers}
        if rule.namespace != pool.namespace:
            grants = await self._write.reference_grants(namespace=pool.namespace)
            if not grant_allows(
                grants, from_namespace=rule.namespace, services=[*services.values()]
            ):
                raise TargetSyncError(
                    f"{rule.text} is in another namespace than the pool: create a "
                    f"ReferenceGrant in {pool.namespace} from HTTPRoute in {rule.namespace} "
                    "to Service (see docs/gateway-api.md)",
                    reason=TargetReason.REFERENCE_NOT_PERMITTED,
                )
        port = spec.target_ports[0].number
        wanted = _Wanted(
            pool=pool,
            rule=rule,
            owner=owner,
            labels=labels,
            port=port,
            spec=spec,
            services=services,
            tiers=tiers,
            endpoints=endpoints,
        )
        current_refs = list(route["spec"]["rules"][index].get("backendRefs") or [])
        self._count_overwrite(pool=pool, refs=current_refs, namespace=rule.namespace)
        # Forgotten until this apply completes: a half-done apply is not someone's overwrite.
        self._written.pop(pool, None)
        owned = await self._write.list_owned(namespace=pool.namespace, labels=labels)
        route = await self._converge(
            wanted=wanted, route=route, index=index, current_refs=current_refs, owned=owned
        )
        self._tiers[pool] = tiers
        self._written[pool] = normalised_refs(
            route["spec"]["rules"][index].get("backendRefs") or [], namespace=rule.namespace
        )
        await self._collect(wanted=wanted, owned=owned, referenced=current_refs)
        overwrites = self._overwrites.get(pool, 0)
        if overwrites >= CONTESTED_AFTER:
            who = last_rules_manager(route, ours=FIELD_MANAGER)
            by = f" (last by field manager {who})" if who else ""
            raise TargetSyncError(
                f"{rule.text}: its backendRefs were replaced {overwrites} times in a row{by}; "
                "trimtab restores them with backoff. Make the route's owner ignore that "
                "rule's backendRefs (docs/gateway-api.md)",
                reason=TargetReason.ROUTE_CONTESTED,
            )
        state = self._judge(pool=pool, route=route, rule=rule)
        self._states[pool] = state
        return state

    async def remove(self, *, pool: PoolKey) -> None:
        rule = RuleRef.of(pool=pool, spec=self._spec)
        labels = objects.owned_labels(pool=pool, rule=rule)
        route = await self._write.get_route(namespace=rule.namespace, name=rule.route)
        index = find_rule(route, rule=rule) if route is not None else None
        owned = await self._write.list_owned(namespace=pool.namespace, labels=labels)
        ours = {str(s["metadata"]["name"]) for s in owned.services}
        if route is not None and index is not None:
            refs = route["spec"]["rules"][index].get("backendRefs") or []
            key = ORIGINAL_REFS_ANNOTATION + rule.key
            saved = route.get("metadata", {}).get("annotations", {}).get(key)
            if saved is not None or any(ref.get("name") in ours for ref in refs):
                # Hand the rule back as trimtab found it (or empty, if it had no backends).
                restored = json.loads(saved) if saved is not None else []
                ops = rule_patch_ops(
                    route,
                    index=index,
                    refs=restored,
                    annotations={key: None} if saved is not None else {},
                )
                await self._write.patch_route(namespace=rule.namespace, name=rule.route, ops=ops)
        for kind, items in (("EndpointSlice", owned.slices), ("Service", owned.services)):
            for item in items:
                await self._write.delete(
                    kind=kind,
                    namespace=pool.namespace,
                    name=str(item["metadata"]["name"]),
                    labels=labels,
                )
        for memory in (self._owners, self._tiers, self._written, self._overwrites):
            memory.pop(pool, None)
        self._pending_since.pop(pool, None)
        self._states.pop(pool, None)

    def _tier_count(self, spec: InferencePoolSpec) -> int:
        # The name (route and rule) identifies this target; tiers may change under it.
        for entry in spec.targets:
            ref = entry.gateway_api
            if ref is not None and (ref.http_route, ref.rule_name, ref.rule_index) == (
                self._spec.http_route,
                self._spec.rule_name,
                self._spec.rule_index,
            ):
                return ref.tiers
        return self._spec.tiers

    async def _route(self, *, rule: RuleRef) -> tuple[Mapping[str, Any], int]:
        route = await self._write.get_route(namespace=rule.namespace, name=rule.route)
        if route is None:
            raise TargetSyncError(
                f"HTTPRoute {rule.namespace}/{rule.route} does not exist",
                reason=TargetReason.HTTP_ROUTE_NOT_FOUND,
            )
        index = find_rule(route, rule=rule)
        if index is None:
            raise TargetSyncError(
                f"{rule.text} does not exist: {describe_rules(route)}",
                reason=TargetReason.RULE_NOT_FOUND,
            )
        return route, index

    async def _owner(self, pool: PoolKey) -> Owner:
        owner = self._owners.get(pool)
        if owner is None:
            owner = Owner(name=pool.name, uid=await self._write.pool_uid(pool=pool))
            self._owners[pool] = owner
        return owner

    def _count_overwrite(
        self, *, pool: PoolKey, refs: Sequence[Mapping[str, Any]], namespace: str
    ) -> None:
        written = self._written.get(pool)
        if written is None:
            return
        if normalised_refs(refs, namespace=namespace) != written:
            self._overwrites[pool] = self._overwrites.get(pool, 0) + 1
        else:
            self._overwrites[pool] = 0

    async def _converge(
        self,
        *,
        wanted: _Wanted,
        route: Mapping[str, Any],
        index: int,
        current_refs: Sequence[Mapping[str, Any]],
        owned: OwnedObjects,
    ) -> Mapping[str, Any]:
        rule = wanted.rule
        ours = {str(s["metadata"]["name"]) for s in owned.services}
        members: dict[str, set[str]] = {name: set() for name in ours}
        for item in owned.slices:
            service = item["metadata"].get("labels", {}).get(objects.SERVICE_NAME_LABEL)
            if service in members:
                for endpoint in item.get("endpoints") or []:
                    for address in endpoint.get("addresses") or []:
                        for port in item.get("ports") or []:
                            members[service].add(f"{address}:{port.get('port')}")
        foreign: dict[str, Mapping[str, Any]] = {}
        refs: dict[str, int] = {}
        for position, ref in enumerate(current_refs):
            mine = (
                (ref.get("group") or "") == ""
                and (ref.get("kind") or "Service") == "Service"
                and (ref.get("namespace") or rule.namespace) == wanted.pool.namespace
                and ref.get("name") in ours
            )
            key = str(ref.get("name")) if mine else f"\0{position}"
            if not mine:
                foreign[key] = ref
            refs[key] = int(ref.get("weight", 1))
        current = Layout(refs=refs, tiers={n: frozenset(m) for n, m in members.items()})
        desired = Layout(
            refs={wanted.services[t.slot]: t.weight for t in wanted.tiers},
            tiers={wanted.services[t.slot]: wanted.members(t) for t in wanted.tiers},
        )
        annotations: dict[str, str | None] = {}
        key = ORIGINAL_REFS_ANNOTATION + rule.key
        if foreign and key not in route.get("metadata", {}).get("annotations", {}):
            annotations[key] = json.dumps(list(current_refs), sort_keys=True)
        by_service = {wanted.services[t.slot]: t for t in wanted.tiers}
        for step in plan_moves(current=current, desired=desired):
            if isinstance(step, CreateTiers | MoveSlices):
                for name in step.tiers:
                    await self._put_tier(wanted=wanted, tier=by_service[name], owned=owned)
            elif isinstance(step, WriteRefs):
                refs_out = []
                for name, weight in step.refs.items():
                    if name in foreign:
                        refs_out.append({**foreign[name], "weight": weight})
                    else:
                        refs_out.extend(
                            objects.backend_refs(
                                weights={name: weight},
                                port=wanted.port,
                                namespace=(
                                    wanted.pool.namespace
                                    if rule.namespace != wanted.pool.namespace
                                    else None
                                ),
                            )
                        )
                route = await self._patch(
                    rule=rule, route=route, index=index, refs=refs_out, annotations=annotations
                )
                annotations = {}
        return route

    async def _patch(
        self,
        *,
        rule: RuleRef,
        route: Mapping[str, Any],
        index: int,
        refs: Sequence[Mapping[str, Any]],
        annotations: Mapping[str, str | None],
    ) -> Mapping[str, Any]:
        try:
            ops = rule_patch_ops(route, index=index, refs=refs, annotations=annotations)
            return await self._write.patch_route(namespace=rule.namespace, name=rule.route, ops=ops)
        except KubeConflict as exc:
            raise TargetSyncError(
                f"{rule.text} changed while trimtab wrote it; retrying: {exc}",
                reason=TargetReason.GATEWAY_API_WRITE_FAILED,
            ) from exc

    async def _put_tier(self, *, wanted: _Wanted, tier: Tier, owned: OwnedObjects) -> None:
        name = wanted.services[tier.slot]
        await self._write.put(wanted.service(tier, name), labels=wanted.labels)
        slices = wanted.slices(tier, name)
        for piece in slices:
            await self._write.put(piece, labels=wanted.labels)
        keep = {str(s["metadata"]["name"]) for s in slices}
        for item in owned.slices:
            labels = item["metadata"].get("labels", {})
            stale = str(item["metadata"]["name"]) not in keep
            if labels.get(objects.SERVICE_NAME_LABEL) == name and stale:
                await self._write.delete(
                    kind="EndpointSlice",
                    namespace=wanted.pool.namespace,
                    name=str(item["metadata"]["name"]),
                    labels=wanted.labels,
                )

    async def _collect(
        self, *, wanted: _Wanted, owned: OwnedObjects, referenced: Sequence[Mapping[str, Any]]
    ) -> None:
        """Delete tiers neither wanted nor named by the route as it was read this apply: a
        tier is dropped from the rule one apply before its objects go."""
        keep = set(wanted.services.values()) | {str(ref.get("name")) for ref in referenced}
        for item in owned.slices:
            service = item["metadata"].get("labels", {}).get(objects.SERVICE_NAME_LABEL)
            if service not in keep:
                await self._write.delete(
                    kind="EndpointSlice",
                    namespace=wanted.pool.namespace,
                    name=str(item["metadata"]["name"]),
                    labels=wanted.labels,
                )
        for item in owned.services:
            if str(item["metadata"]["name"]) not in keep:
                await self._write.delete(
                    kind="Service",
                    namespace=wanted.pool.namespace,
                    name=str(item["metadata"]["name"]),
                    labels=wanted.labels,
                )

    def _judge(self, *, pool: PoolKey, route: Mapping[str, Any], rule: RuleRef) -> TargetState:
        verdict = route_verdict(route, rule=rule)
        if verdict.reason != TargetReason.PENDING:
            self._pending_since.pop(pool, None)
            return verdict
        since = self._pending_since.setdefault(pool, self._clock())
        if self._clock() - since > self._grace_s:
            return TargetState(False, TargetReason.NO_GATEWAY_STATUS, verdict.message)
        return verdict


@dataclass(frozen=True, kw_only=True)
class _Wanted:
    """Everything one apply builds objects from."""

    pool: PoolKey
    rule: RuleRef
    owner: Owner
    labels: Mapping[str, str]
    port: int
    spec: InferencePoolSpec
    services: Mapping[int, str]
    tiers: Sequence[Tier]
    endpoints: Mapping[PodName, Endpoint]

    def members(self, tier: Tier) -> frozenset[str]:
        return frozenset(objects.endpoint_key(self.endpoints[pod]) for pod in tier.pods)

    def service(self, tier: Tier, name: str) -> dict[str, Any]:
        return objects.service(
            pool=self.pool,
            rule=self.rule,
            owner=self.owner,
            name=name,
            slot=tier.slot,
            port=self.port,
            app_protocol=self.spec.app_protocol,
        )

    def slices(self, tier: Tier, name: str) -> list[dict[str, Any]]:
        try:
            return objects.endpoint_slices(
                pool=self.pool,
                rule=self.rule,
                owner=self.owner,
                service_name=name,
                slot=tier.slot,
                endpoints=[self.endpoints[pod] for pod in tier.pods],
                pods=self.spec.endpoints is None,
                app_protocol=self.spec.app_protocol,
            )
        except ValueError as exc:
            raise TargetSyncError(str(exc), reason=TargetReason.INVALID_DECISION) from exc
