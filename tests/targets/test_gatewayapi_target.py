"""The gatewayAPI target end to end over an in-memory API: what it writes, in which order.

Every Service and EndpointSlice written is validated strictly against Kubernetes' OpenAPI
(kubernetes-validate) and every route after a patch against the real HTTPRoute CRD
(v1.6.1, ``../shared/third_party``), by :class:`support.gatewayapi.MemoryGatewayWriter`,
which also records any state in which a weighted backend had no endpoint.
"""

from __future__ import annotations

import json
import random
from typing import Any

import jsonschema
import pytest

from support.gatewayapi import GATEWAY_API, MemoryGatewayWriter, route, validate_custom
from trimtab.api.reasons import TargetReason
from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import TargetSyncError
from trimtab.targets.gatewayapi.target import CONTESTED_AFTER, GatewayAPITierTarget

POOL = PoolKey("serving", "llama")
OTHER_RULE = {
    "name": "health",
    "matches": [{"path": {"type": "PathPrefix", "value": "/health"}}],
    "backendRefs": [{"name": "health", "port": 80, "weight": 1}],
}
OUR_RULE = {
    "name": "completions",
    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"}}],
    "backendRefs": [{"name": "llama-plain", "port": 8000}],
}


def spec(*, tiers: int = 16, namespace: str | None = None) -> InferencePoolSpec:
    ref: dict[str, Any] = {"name": "llama"}
    if namespace:
        ref["namespace"] = namespace
    return InferencePoolSpec.model_validate(
        {
            "selector": {"matchLabels": {"app": "llama"}},
            "targets": [
                {"gatewayAPI": {"httpRoute": ref, "ruleName": "completions", "tiers": tiers}}
            ],
        }
    )


def members(count: int) -> dict[PodName, Endpoint]:
    return {
        PodName(f"llama-{i}"): Endpoint(
            PodName(f"llama-{i}"), f"10.0.{i // 200}.{i % 200 + 1}", 8000
        )
        for i in range(count)
    }


def decision(weights: dict[PodName, int]) -> Decision:
    return Decision(
        tuple(
            PodDecision(name=n, weight=w, max_in_flight=64, state=PodState.SERVING, reason="")
            for n, w in sorted(weights.items())
        )
    )


def setup(
    *, namespace: str = "serving", strict: bool = True
) -> tuple[MemoryGatewayWriter, GatewayAPITierTarget]:
    writer = MemoryGatewayWriter(foreign={"llama-plain", "health"}, strict=strict)
    writer.put_route(
        route(
            namespace=namespace,
            name="llama",
            rules=[OTHER_RULE, OUR_RULE, OTHER_RULE | {"name": "b"}],
        )
    )
    writer.watched = ((namespace, "llama"), 1, "serving")
    pool_spec = spec(namespace=None if namespace == "serving" else namespace)
    gateway = pool_spec.targets[0].gateway_api
    assert gateway is not None
    return writer, GatewayAPITierTarget(spec=gateway, write=writer)


def our_refs(writer: MemoryGatewayWriter, namespace: str = "serving") -> list[dict[str, Any]]:
    refs: list[dict[str, Any]] = writer.routes[namespace, "llama"]["spec"]["rules"][1][
        "backendRefs"
    ]
    return refs


async def test_forty_pods_in_sixteen_tiers_validate_against_the_real_crds() -> None:
    writer, target = setup()
    pods = members(40)
    weights = {name: 50 + 25 * i for i, name in enumerate(pods)}
    await target.apply(pool=POOL, spec=spec(), decision=decision(weights), endpoints=pods)
    refs = our_refs(writer)
    assert len(refs) == 16
    assert sum(r["weight"] for r in refs) == sum(weights.values())
    assert len(writer.services) == 16
    served = [e["targetRef"]["name"] for s in writer.slices.values() for e in s["endpoints"]]
    assert sorted(served) == sorted(pods)
    validate_custom(
        writer.routes["serving", "llama"], crd_file=GATEWAY_API / "httproutes.yaml", version="v1"
    )
    for service in writer.services.values():
        assert service["metadata"]["labels"]["trimtab.io/pool"] == "llama"
        assert service["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "trimtab.io/v1alpha1",
                "kind": "InferencePool",
                "name": "llama",
                "uid": "pool-uid",
                "controller": True,
            }
        ]
        assert "selector" not in service["spec"]
    assert writer.violations == []


async def test_seventeen_backend_refs_are_refused_by_the_crd() -> None:
    body = route(namespace="serving", name="r", rules=[OUR_RULE])
    body["spec"]["rules"][0]["backendRefs"] = [{"name": f"s{i}", "port": 80} for i in range(17)]
    with pytest.raises(jsonschema.ValidationError, match="is too long"):
        validate_custom(body, crd_file=GATEWAY_API / "httproutes.yaml", version="v1")
    body["spec"]["rules"][0]["backendRefs"] = [{"name": "s", "port": 80, "weight": 1_000_001}]
    with pytest.raises(jsonschema.ValidationError, match="is greater than the maximum"):
        validate_custom(body, crd_file=GATEWAY_API / "httproutes.yaml", version="v1")


async def test_only_the_named_rule_changes() -> None:
    writer, target = setup()
    before = json.loads(json.dumps(writer.routes["serving", "llama"]))
    pods = members(5)
    await target.apply(
        pool=POOL, spec=spec(), decision=decision({p: 100 for p in pods}), endpoints=pods
    )
    after = writer.routes["serving", "llama"]
    assert after["spec"]["rules"][0] == before["spec"]["rules"][0]
    assert after["spec"]["rules"][2] == before["spec"]["rules"][2]
    assert {k: v for k, v in after["spec"]["rules"][1].items() if k != "backendRefs"} == {
        k: v for k, v in before["spec"]["rules"][1].items() if k != "backendRefs"
    }
    assert after["spec"]["parentRefs"] == before["spec"]["parentRefs"]
    assert len(our_refs(writer)) == 5


async def test_tier_moves_never_leave_a_weighted_backend_empty() -> None:
    # Objects' shapes are validated by the other tests; this one checks every intermediate state.
    writer, target = setup(strict=False)
    rng = random.Random(14)
    names = [PodName(f"llama-{i}") for i in range(60)]
    everyone = {n: Endpoint(n, f"10.1.0.{i + 1}", 8000) for i, n in enumerate(names)}
    present = set(names[:30])
    for step in range(60):
        # Pods come and go, weights swing: tiers regroup, grow, shrink and disappear.
        for name in rng.sample(names, 4):
            (present.discard if name in present and len(present) > 1 else present.add)(name)
        tiers = rng.choice([1, 2, 4, 16])
        weights = {n: rng.choice([20, 100, 500, 1000, 1000]) for n in present}
        pods = {n: everyone[n] for n in present}
        await target.apply(
            pool=POOL, spec=spec(tiers=tiers), decision=decision(weights), endpoints=pods
        )
        served = {
            e["targetRef"]["name"]
            for s in writer.slices.values()
            for e in s["endpoints"]
            if s["metadata"]["labels"]["kubernetes.io/service-name"]
            in {r["name"] for r in our_refs(writer)}
        }
        assert served == present, f"step {step}"
        assert len(our_refs(writer)) <= tiers
    assert writer.violations == []
    assert any(w.startswith("delete Service") for w in writer.writes)


async def test_a_tier_is_drained_to_weight_zero_before_it_goes() -> None:
    writer, target = setup()
    pods = members(3)
    await target.apply(
        pool=POOL, spec=spec(), decision=decision({p: 100 for p in pods}), endpoints=pods
    )
    fewer = dict(list(pods.items())[:2])
    await target.apply(
        pool=POOL, spec=spec(), decision=decision({p: 100 for p in fewer}), endpoints=fewer
    )
    assert len(our_refs(writer)) == 2
    assert len(writer.services) == 3  # the third goes only once the route no longer names it
    await target.apply(
        pool=POOL, spec=spec(), decision=decision({p: 100 for p in fewer}), endpoints=fewer
    )
    assert len(writer.services) == 2
    assert writer.violations == []


async def test_missing_route_and_missing_rule_have_their_reasons() -> None:
    writer, target = setup()
    pods = members(2)
    writer.routes.clear()
    with pytest.raises(TargetSyncError) as missing:
        await target.apply(
            pool=POOL, spec=spec(), decision=decision({p: 1 for p in pods}), endpoints=pods
        )
    assert missing.value.reason == TargetReason.HTTP_ROUTE_NOT_FOUND
    writer.put_route(route(namespace="serving", name="llama", rules=[OTHER_RULE]))
    with pytest.raises(TargetSyncError) as no_rule:
        await target.apply(
            pool=POOL, spec=spec(), decision=decision({p: 1 for p in pods}), endpoints=pods
        )
    assert no_rule.value.reason == TargetReason.RULE_NOT_FOUND
    assert "named health" in str(no_rule.value)


async def test_a_cross_namespace_route_needs_a_reference_grant() -> None:
    writer, target = setup(namespace="gateways")
    pods = members(2)
    weights = decision({p: 1 for p in pods})
    with pytest.raises(TargetSyncError) as refused:
        await target.apply(
            pool=POOL, spec=spec(namespace="gateways"), decision=weights, endpoints=pods
        )
    assert refused.value.reason == TargetReason.REFERENCE_NOT_PERMITTED
    assert writer.services == {}
    writer.grants["serving"] = [
        {
            "spec": {
                "from": [
                    {
                        "group": "gateway.networking.k8s.io",
                        "kind": "HTTPRoute",
                        "namespace": "gateways",
                    }
                ],
                "to": [{"group": "", "kind": "Service"}],
            }
        }
    ]
    await target.apply(pool=POOL, spec=spec(namespace="gateways"), decision=weights, endpoints=pods)
    assert {r["namespace"] for r in our_refs(writer, "gateways")} == {"serving"}
    assert writer.violations == []


async def test_a_route_overwritten_again_and_again_is_contested() -> None:
    writer, target = setup()
    pods = members(2)
    weights = decision({p: 100 for p in pods})
    await target.apply(pool=POOL, spec=spec(), decision=weights, endpoints=pods)
    reasons = []
    for _ in range(CONTESTED_AFTER):
        body = writer.routes["serving", "llama"]
        body["spec"]["rules"][1]["backendRefs"] = [{"name": "llama-plain", "port": 8000}]
        writer.put_route(body)  # e.g. a GitOps sync of the manifest
        try:
            await target.apply(pool=POOL, spec=spec(), decision=weights, endpoints=pods)
            reasons.append("ok")
        except TargetSyncError as exc:
            reasons.append(exc.reason)
    assert reasons == ["ok"] * (CONTESTED_AFTER - 1) + [TargetReason.ROUTE_CONTESTED]
    assert len(our_refs(writer)) == 2  # restored every time
    await target.apply(pool=POOL, spec=spec(), decision=weights, endpoints=pods)  # left alone: ok


async def test_status_of_the_parents_is_read_back() -> None:
    writer, target = setup()
    pods = members(2)
    weights = decision({p: 100 for p in pods})
    state = await target.apply(pool=POOL, spec=spec(), decision=weights, endpoints=pods)
    assert state.reason == TargetReason.PENDING
    body = writer.routes["serving", "llama"]
    generation = body["metadata"]["generation"]

    def parent(accepted: str, resolved: str, reason: str = "Ok") -> dict[str, Any]:
        return {
            "parentRef": {"name": "gw"},
            "controllerName": "example.com/gateway",
            "conditions": [
                {
                    "type": "Accepted",
                    "status": accepted,
                    "reason": "Accepted",
                    "observedGeneration": generation,
                },
                {
                    "type": "ResolvedRefs",
                    "status": resolved,
                    "reason": reason,
                    "observedGeneration": generation,
                    "message": "svc gone",
                },
            ],
        }

    body["status"] = {"parents": [parent("True", "False", "BackendNotFound")]}
    state = await target.apply(pool=POOL, spec=spec(), decision=weights, endpoints=pods)
    assert state.reason == TargetReason.BACKEND_REFS_NOT_RESOLVED
    assert "BackendNotFound" in state.message
    body["status"] = {"parents": [parent("True", "True")]}
    state = await target.apply(pool=POOL, spec=spec(), decision=weights, endpoints=pods)
    assert state.synced and state.reason == TargetReason.SYNCED


async def test_remove_restores_the_rule_and_deletes_the_tiers() -> None:
    writer, target = setup()
    pods = members(4)
    await target.apply(
        pool=POOL, spec=spec(), decision=decision({p: 10 for p in pods}), endpoints=pods
    )
    await target.remove(pool=POOL)
    assert our_refs(writer) == OUR_RULE["backendRefs"]
    assert writer.services == {} and writer.slices == {}
    assert not any(
        k.startswith("trimtab.io/")
        for k in writer.routes["serving", "llama"]["metadata"].get("annotations", {})
    )


async def test_an_object_of_a_tier_name_that_is_not_ours_is_left_alone() -> None:
    writer, target = setup()
    pods = members(1)
    await target.apply(
        pool=POOL, spec=spec(), decision=decision({p: 10 for p in pods}), endpoints=pods
    )
    name = next(iter(writer.services))
    writer.services[name]["metadata"]["labels"] = {"app": "someone-else"}
    writer.slices.clear()
    more = members(2)
    with pytest.raises(TargetSyncError) as refused:
        await target.apply(
            pool=POOL, spec=spec(), decision=decision({p: 10 for p in more}), endpoints=more
        )
    assert refused.value.reason == TargetReason.OBJECT_NOT_OWNED
    assert writer.services[name]["metadata"]["labels"] == {"app": "someone-else"}
