"""A Prometheus outage end to end: the real process is terminated under a running operator.

Aspects tested: ``MetricsAvailable`` flips to False (with a ``MetricsStale`` warning), and
once the kept samples are older than ``staleAfter`` the weights decay to equal while every
Ready pod stays in the status with a positive weight, checked on every poll.
Not tested: recovery after Prometheus returns (tests/controller covers the condition flip).
"""

from __future__ import annotations

from e2e.conftest import (
    NAMESPACE,
    POD_NAMES,
    POOL,
    OperatorThread,
    condition,
    eventually,
    pool_spec,
    status,
    weights,
)
from support.emulators import Pod, pinned
from support.kube import Cluster
from support.prometheus import Prometheus

# Stale weights decay with a 10 s time constant (policy default) in log space, so a pod at
# the weight floor needs ~45 s to reach equal weight; a moderate load keeps this test short.
_EQUALISE_TIMEOUT_S = 60.0


def every_pod_kept(kube: Cluster) -> dict[str, int]:
    """The weights, after checking that no Ready pod left the status or got weight 0."""
    found = weights(kube)
    assert sorted(found) == sorted(POD_NAMES), f"a Ready pod left the status: {found}"
    assert all(weight > 0 for weight in found.values()), f"a Ready pod got weight 0: {found}"
    return found


async def test_prometheus_outage_flips_metrics_available_and_equalises_weights(
    kube: Cluster, pods: list[Pod], prometheus: Prometheus, operator: OperatorThread
) -> None:
    spec = pool_spec(port=pods[0].port, source="prometheus", prometheus_url=prometheus.url)
    await kube.create_pool(namespace=NAMESPACE, name=POOL, spec=spec)
    busy = pods[0].name
    # 8 x 12,000 prompt tokens hold ~25 % of the KV cache with nothing queued once prefilled.
    async with pinned(
        pods[0], requests=8, prompt_tokens=12_000, max_tokens=8_000, deadline_s=90.0
    ) as load:

        def settled_lighter() -> bool:
            rows = {row["name"]: row for row in status(kube).get("pods", [])}
            if sorted(rows) != sorted(POD_NAMES):
                return False
            loaded = rows[busy]
            others = [row["weight"] for name, row in rows.items() if name != busy]
            prefilled = loaded.get("waiting") == 0 and (loaded.get("kvUsage") or 0) > 0.15
            return prefilled and all(loaded["weight"] < weight for weight in others)

        await eventually(settled_lighter, what=f"{busy} loaded, prefilled and lighter")
        await prometheus.stop()
        await eventually(
            lambda: condition(kube, "MetricsAvailable").get("status") == "False",
            what="MetricsAvailable=False",
        )
        assert condition(kube, "MetricsAvailable")["reason"] == "SourceUnavailable"
        # Events go through kopf's poster: they may land a moment after the status.
        stale = await eventually(
            lambda: kube.events(namespace=NAMESPACE, reason="MetricsStale"),
            what="a MetricsStale event",
        )
        assert stale[0]["type"] == "Warning"
        await eventually(
            lambda: len(set(every_pod_kept(kube).values())) == 1,
            timeout_s=_EQUALISE_TIMEOUT_S,
            what="equal weights",
        )
        assert load.error is None, load.error
    assert {row["state"] for row in status(kube)["pods"]} == {"Stale"}
    assert condition(kube, "Ready")["status"] == "True"
