"""The operator end to end: real kopf, real emulated vLLM pods, real Prometheus, emulated API.

Aspects tested, once per metrics source (``prometheus``, and ``direct`` as the cheaper path):
an InferencePool over three Ready pods gets every pod in its status with its address, a
weight, a cap and the load read from the pod; pinning one pod with long streaming requests
posts a ``Rebalanced`` event and gives that pod less weight than the idle ones.
Not tested here: Envoy applying the weights (tests/targets, tests/envoy) and the policy's
numbers (tests/policy). Every wait polls with a deadline; no test asserts on durations.
"""

from __future__ import annotations

from e2e.conftest import (
    NAMESPACE,
    POD_NAMES,
    POOL,
    Metrics,
    OperatorThread,
    condition,
    eventually,
    pool_spec,
    status,
    weights,
)
from support.emulators import Pod, pinned
from support.kube import Cluster


async def start_pool(*, kube: Cluster, pods: list[Pod], metrics: Metrics) -> None:
    spec = pool_spec(port=pods[0].port, source=metrics.source, prometheus_url=metrics.url)
    await kube.create_pool(namespace=NAMESPACE, name=POOL, spec=spec)


def all_read(kube: Cluster) -> bool:
    """Every pod is listed and its load was read (the emulators report zeros, not nothing)."""
    rows = status(kube).get("pods", [])
    names_ok = sorted(row["name"] for row in rows) == sorted(POD_NAMES)
    return names_ok and all(row.get("kvUsage") is not None for row in rows)


async def test_status_lists_each_ready_pod_with_weight_cap_and_load(
    kube: Cluster, pods: list[Pod], metrics: Metrics, operator: OperatorThread
) -> None:
    await start_pool(kube=kube, pods=pods, metrics=metrics)
    await eventually(lambda: all_read(kube), what="every pod listed with its load")
    await eventually(lambda: condition(kube, "MetricsAvailable").get("status") == "True")
    rows = {row["name"]: row for row in status(kube)["pods"]}
    assert {name: row["address"] for name, row in rows.items()} == {p.name: p.ip for p in pods}
    assert all(row["weight"] >= 1 and row["maxInFlight"] >= 1 for row in rows.values())
    assert all(row["running"] == 0 and row["waiting"] == 0 for row in rows.values())
    assert condition(kube, "Ready")["status"] == "True"


async def test_pinned_pod_loses_weight_with_a_rebalanced_event(
    kube: Cluster, pods: list[Pod], metrics: Metrics, operator: OperatorThread
) -> None:
    await start_pool(kube=kube, pods=pods, metrics=metrics)
    await eventually(lambda: all_read(kube), what="every pod listed with its load")
    busy, idle = pods[0].name, [p.name for p in pods[1:]]
    # 40 x 8,000 prompt tokens fill ~80 % of the profile's KV cache and queue most of them.
    async with pinned(
        pods[0], requests=40, prompt_tokens=8_000, max_tokens=4_000, deadline_s=40.0
    ) as load:

        def lighter() -> bool:
            found = weights(kube)
            return all(found.get(busy, 0) < found.get(name, 0) for name in idle)

        await eventually(lighter, what=f"{busy} lighter than {idle}")
        events = await eventually(
            lambda: kube.events(namespace=NAMESPACE, reason="Rebalanced"),
            what="a Rebalanced event",
        )
        assert load.error is None, load.error
    assert any(busy in event["message"] for event in events), events
    assert all(weight >= 1 for weight in weights(kube).values())
