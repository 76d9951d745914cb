"""The gatewayAPI target in the real kopf operator against the emulated API server.

The emulator is taught HTTPRoutes, ReferenceGrants, Services and EndpointSlices and holds the
real Gateway API and GIE CRDs (``../shared/third_party``) next to trimtab's, so discovery
sees both InferencePool kinds side by side.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest
import pytest_asyncio

from kube.conftest import FAST, NAMESPACE, eventually
from support.fakes import FakeMetrics, FakeSources
from support.gatewayapi import GATEWAY_API, GIE, crd, route, validate_core, validate_custom
from support.kube import CRD_PATH, CRDS, VERBS, Cluster
from trimtab.kube.running import OperatorConfig, run_operator

LABELS = {"app": "vllm"}
ROUTES = "gateway.networking.k8s.io/v1/httproutes"
RULES = [
    {"name": "health", "backendRefs": [{"name": "health", "port": 80}]},
    {"name": "completions", "backendRefs": [{"name": "vllm-plain", "port": 8000}]},
]


def spec(route_name: str = "llama", rule: str = "completions") -> dict[str, Any]:
    return {
        "selector": {"matchLabels": LABELS},
        "metrics": {"interval": "200ms", "staleAfter": "1s"},
        "policy": {"slowStart": "0s"},
        "targets": [{"gatewayAPI": {"httpRoute": {"name": route_name}, "ruleName": rule}}],
    }


def teach(kube: Cluster) -> None:
    info = kmock.ResourceInfo
    resources = kube.kube.resources
    resources[ROUTES] = info(
        kind="HTTPRoute",
        singular="httproute",
        namespaced=True,
        verbs=VERBS,
        subresources={"status"},
    )
    resources["gateway.networking.k8s.io/v1beta1/referencegrants"] = info(
        kind="ReferenceGrant", singular="referencegrant", namespaced=True, verbs=VERBS
    )
    resources["v1/services"] = info(
        kind="Service", singular="service", namespaced=True, verbs=VERBS
    )
    resources["discovery.k8s.io/v1/endpointslices"] = info(
        kind="EndpointSlice", singular="endpointslice", namespaced=True, verbs=VERBS
    )
    resources["inference.networking.k8s.io/v1/inferencepools"] = info(
        kind="InferencePool",
        singular="inferencepool",
        namespaced=True,
        verbs=VERBS,
        shortnames={"infpool"},
        subresources={"status"},
    )
    for path in (
        GATEWAY_API / "httproutes.yaml",
        GATEWAY_API / "referencegrants.yaml",
        GIE / "inferencepools.yaml",
    ):
        body = crd(path)
        kube.kube.objects[CRDS, None, body["metadata"]["name"]] = body


def objects(kube: Cluster, resource: str) -> dict[str, dict[str, Any]]:
    return {
        name: obj.raw
        for (res, ns, name), obj in kube.kube.objects.items()
        if res == kmock.resource(resource) and ns == NAMESPACE and not obj.deleted
    }


def our_refs(kube: Cluster) -> list[dict[str, Any]]:
    found = objects(kube, ROUTES).get("llama")
    return found["spec"]["rules"][1].get("backendRefs", []) if found else []


def condition(kube: Cluster, kind: str) -> dict[str, Any]:
    pool = kube.pool(namespace=NAMESPACE, name="llama") or {}
    return next((c for c in pool.get("status", {}).get("conditions", []) if c["type"] == kind), {})


@pytest_asyncio.fixture()
async def gateway_operator(kube: Cluster) -> AsyncIterator[None]:
    teach(kube)
    stop = asyncio.Event()
    config = OperatorConfig(
        namespaces=[NAMESPACE],
        connection=kube.connection,
        loop=FAST,
        scanning=False,
        gateway_api=True,
    )
    task = asyncio.create_task(
        run_operator(config=config, stop=stop, sources=FakeSources(FakeMetrics())),
        name="operator under test",
    )
    yield
    stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=20)


async def create_route(kube: Cluster) -> None:
    body = route(namespace=NAMESPACE, name="llama", rules=RULES)
    url = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NAMESPACE}/httproutes"
    async with kube.kube.post(url, json=body) as response:
        assert response.status < 400, await response.text()


async def add_pods(kube: Cluster, count: int) -> None:
    for i in range(count):
        await kube.put_pod(
            namespace=NAMESPACE, name=f"pod-{i}", labels=LABELS, ip=f"10.0.0.{i + 1}"
        )


async def test_route_rule_gets_tiers_owned_by_the_pool_and_cleaned_up_on_delete(
    kube: Cluster, gateway_operator: None
) -> None:
    await create_route(kube)
    await add_pods(kube, 3)
    await kube.create_pool(namespace=NAMESPACE, name="llama", spec=spec())
    await eventually(lambda: len(our_refs(kube)) == 3)
    current = objects(kube, ROUTES)["llama"]
    validate_custom(current, crd_file=GATEWAY_API / "httproutes.yaml", version="v1")
    assert current["spec"]["rules"][0] == RULES[0]
    assert current["metadata"]["annotations"]  # the rule's original backendRefs, kept
    uid = (kube.pool(namespace=NAMESPACE, name="llama") or {})["metadata"]["uid"]
    services = objects(kube, "v1/services")
    slices = objects(kube, "discovery.k8s.io/v1/endpointslices")
    assert set(services) == {ref["name"] for ref in our_refs(kube)}
    for obj in [*services.values(), *slices.values()]:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
        assert obj["metadata"]["labels"]["trimtab.io/pool"] == "llama"
        validate_core(
            {k: v for k, v in obj.items() if k != "status"}
            | {
                "metadata": {
                    k: v
                    for k, v in obj["metadata"].items()
                    if k in ("name", "namespace", "labels", "ownerReferences")
                }
            }
        )
    # A pod leaves: its tier leaves the rule, then its objects go.
    await kube.delete_pod(namespace=NAMESPACE, name="pod-2")
    await eventually(lambda: len(our_refs(kube)) == 2 and len(objects(kube, "v1/services")) == 2)
    await kube.delete_pool(namespace=NAMESPACE, name="llama")
    await eventually(lambda: our_refs(kube) == RULES[1]["backendRefs"])
    await eventually(lambda: not objects(kube, "v1/services"))
    assert not objects(kube, "discovery.k8s.io/v1/endpointslices")


@pytest.mark.parametrize(
    ("route_name", "rule", "reason"),
    [("absent", "completions", "HTTPRouteNotFound"), ("llama", "nope", "RuleNotFound")],
)
async def test_missing_route_or_rule_is_a_condition_and_a_warning(
    kube: Cluster, gateway_operator: None, route_name: str, rule: str, reason: str
) -> None:
    await create_route(kube)
    await add_pods(kube, 1)
    await kube.create_pool(namespace=NAMESPACE, name="llama", spec=spec(route_name, rule))
    synced = await eventually(lambda: condition(kube, "TargetsSynced").get("reason") == reason)
    assert synced
    assert condition(kube, "TargetsSynced")["status"] == "False"
    warnings = await eventually(lambda: kube.events(namespace=NAMESPACE, reason="TargetSyncFailed"))
    assert warnings[0]["type"] == "Warning"
    assert our_refs(kube) == RULES[1]["backendRefs"]


async def test_both_inference_pool_kinds_install_side_by_side(kube: Cluster) -> None:
    teach(kube)
    ours = crd(CRD_PATH)
    theirs = crd(GIE / "inferencepools.yaml")
    for body in (ours, theirs):
        validate_core(body)
    assert ours["spec"]["group"] != theirs["spec"]["group"]
    names = {**ours["spec"]["names"]}
    other = theirs["spec"]["names"]
    assert set(names.get("shortNames", [])).isdisjoint(other.get("shortNames", []))
    assert set(names.get("shortNames", [])).isdisjoint({other["plural"], other["singular"]})
    url = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
    async with kube.kube.get(url) as response:
        listed = {item["metadata"]["name"] for item in (await response.json())["items"]}
    assert {"inferencepools.trimtab.io", "inferencepools.inference.networking.k8s.io"} <= listed
    # Both kinds are served at once, each under its own group.
    await kube.create_pool(namespace=NAMESPACE, name="llama", spec=spec())
    gie = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": NAMESPACE},
        "spec": {
            "selector": {"matchLabels": LABELS},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"name": "trimtab-picker", "port": {"number": 9002}},
        },
    }
    validate_custom(gie, crd_file=GIE / "inferencepools.yaml", version="v1")
    async with kube.kube.post(
        f"/apis/inference.networking.k8s.io/v1/namespaces/{NAMESPACE}/inferencepools", json=gie
    ) as response:
        assert response.status < 400
    assert objects(kube, "inference.networking.k8s.io/v1/inferencepools")["llama"]["spec"][
        "endpointPickerRef"
    ]
    assert kube.pool(namespace=NAMESPACE, name="llama") is not None
