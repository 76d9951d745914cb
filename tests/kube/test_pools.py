"""The operator against the emulated API: pools come, change and go; pods join and leave.

Each test runs the real kopf operator with fake metrics and a recording target and polls
the emulated cluster's state with a bounded deadline (never a wall-clock assertion).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kube.conftest import NAMESPACE, eventually
from support.fakes import FakeMetrics, RecordingTarget
from support.kube import Cluster
from trimtab.api.records import PodSample, PoolKey

LABELS = {"app": "vllm"}
SPEC: dict[str, Any] = {
    "selector": {"matchLabels": LABELS},
    "metrics": {"interval": "200ms", "staleAfter": "1s"},
    "policy": {"slowStart": "0s"},
    "targets": [{"envoy": {"cluster": "llama"}}],
}
POOL = PoolKey(namespace=NAMESPACE, name="llama")


def status(kube: Cluster) -> dict[str, Any]:
    return (kube.pool(namespace=NAMESPACE, name="llama") or {}).get("status", {})


def condition(kube: Cluster, kind: str) -> dict[str, Any]:
    return next((c for c in status(kube).get("conditions", []) if c["type"] == kind), {})


def pod_names(kube: Cluster) -> list[str]:
    return sorted(p["name"] for p in status(kube).get("pods", []))


async def start(kube: Cluster, *, pods: int = 2) -> None:
    for i in range(pods):
        await kube.put_pod(
            namespace=NAMESPACE, name=f"pod-{i}", labels=LABELS, ip=f"10.0.0.{i + 1}"
        )
    await kube.create_pool(namespace=NAMESPACE, name="llama", spec=SPEC)


async def test_status_has_weights_and_caps_of_ready_pods(kube: Cluster, operator: Any) -> None:
    await start(kube)
    await eventually(lambda: pod_names(kube) == ["pod-0", "pod-1"])
    rows = status(kube)["pods"]
    assert all(row["weight"] >= 1 and row["maxInFlight"] >= 1 for row in rows)
    assert status(kube)["observedGeneration"] == 1
    assert condition(kube, "Ready")["status"] == "True"


async def test_spec_change_applies_without_restart(kube: Cluster, operator: Any) -> None:
    await start(kube)
    await eventually(lambda: pod_names(kube) == ["pod-0", "pod-1"])
    await kube.patch_pool(
        namespace=NAMESPACE, name="llama", patch={"spec": {"policy": {"maxInFlightPerPod": 7}}}
    )
    await eventually(lambda: {p["maxInFlight"] for p in status(kube)["pods"]} == {7})
    assert status(kube)["observedGeneration"] == 2


async def test_pods_leaving_readiness_or_deleted_leave_the_pool(
    kube: Cluster, operator: Any
) -> None:
    await start(kube, pods=3)
    await eventually(lambda: pod_names(kube) == ["pod-0", "pod-1", "pod-2"])
    await kube.put_pod(namespace=NAMESPACE, name="pod-1", labels=LABELS, ip="10.0.0.2", ready=False)
    await kube.delete_pod(namespace=NAMESPACE, name="pod-2")
    await eventually(lambda: pod_names(kube) == ["pod-0"])


async def test_deleted_pool_stops_and_clears_its_targets(
    kube: Cluster, operator: Any, target: RecordingTarget
) -> None:
    await start(kube)
    await eventually(lambda: target.last(POOL) is not None)
    await kube.delete_pool(namespace=NAMESPACE, name="llama")
    await eventually(lambda: target.removed == [POOL])
    applied = len(target.applied)
    await eventually(lambda: kube.pool(namespace=NAMESPACE, name="llama") is None)
    await asyncio.sleep(0.5)  # several intervals: nothing more may arrive
    assert len(target.applied) == applied


async def test_loaded_pod_loses_weight_with_a_rebalanced_event(
    kube: Cluster, operator: Any, metrics: FakeMetrics
) -> None:
    await start(kube)
    await eventually(lambda: pod_names(kube) == ["pod-0", "pod-1"])
    metrics.samples["pod-0"] = PodSample(running=60, waiting=20, kv_usage=0.97, age_s=0.0)

    def weights() -> dict[str, int]:
        return {p["name"]: p["weight"] for p in status(kube).get("pods", [])}

    await eventually(lambda: weights().get("pod-0", 0) * 2 < weights().get("pod-1", 0))
    events = await eventually(lambda: kube.events(namespace=NAMESPACE, reason="Rebalanced"))
    assert "pod-0" in events[0]["message"]


async def test_source_down_flips_metrics_available_and_pods_go_stale(
    kube: Cluster, operator: Any, metrics: FakeMetrics
) -> None:
    metrics.samples["pod-0"] = PodSample(running=60, waiting=20, kv_usage=0.97, age_s=0.0)
    await start(kube)
    await eventually(lambda: condition(kube, "MetricsAvailable").get("status") == "True")
    metrics.down = True
    await eventually(lambda: condition(kube, "MetricsAvailable").get("status") == "False")
    # Past staleAfter every pod is Stale and the policy decays them towards equal weights
    # (how fast is the policy's business, tested in tests/policy).
    await eventually(lambda: {p["state"] for p in status(kube)["pods"]} == {"Stale"})
    assert kube.events(namespace=NAMESPACE, reason="MetricsStale")


async def test_source_without_series_is_not_metrics_available(
    kube: Cluster, operator: Any, metrics: FakeMetrics
) -> None:
    # A source that answers but knows none of the pods (wrong engine or label names).
    metrics.default = PodSample(age_s=0.0)
    await start(kube)
    await eventually(lambda: condition(kube, "MetricsAvailable").get("reason") == "NoSeries")
    assert condition(kube, "MetricsAvailable")["status"] == "False"
    assert "spec.engine" in condition(kube, "MetricsAvailable")["message"]
    assert all(p["weight"] > 0 for p in status(kube)["pods"])


async def test_invalid_pool_is_reported_while_another_is_served(
    kube: Cluster, operator: Any
) -> None:
    await start(kube)
    bad = {**SPEC, "metrics": {"interval": "2s", "staleAfter": "1s"}}
    await kube.create_pool(namespace=NAMESPACE, name="broken", spec=bad)

    def broken_ready() -> dict[str, Any]:
        body = kube.pool(namespace=NAMESPACE, name="broken") or {}
        found = [c for c in body.get("status", {}).get("conditions", []) if c["type"] == "Ready"]
        return found[0] if found else {}

    await eventually(lambda: broken_ready().get("reason") == "SpecInvalid")
    assert "staleAfter" in broken_ready()["message"]
    assert kube.events(namespace=NAMESPACE, reason="SpecInvalid")
    await eventually(lambda: pod_names(kube) == ["pod-0", "pod-1"])


async def test_no_ready_pods_is_a_condition_and_a_warning(kube: Cluster, operator: Any) -> None:
    await kube.create_pool(namespace=NAMESPACE, name="llama", spec=SPEC)
    await eventually(lambda: condition(kube, "Ready").get("reason") == "NoReadyPods")
    assert kube.events(namespace=NAMESPACE, reason="NoReadyPods")[0]["type"] == "Warning"
