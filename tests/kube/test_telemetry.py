"""trimtab's own /metrics (controller/telemetry.py), scraped over real HTTP on 127.0.0.1.

Aspects tested:
- After a decision, a sync error and an event, every documented name is served (the names and
  label sets of docs/operations.md, which dashboards and alerts use verbatim) with the
  decision's values: per-pod weight, cap and load; per-pool ready pods, metrics availability,
  sample age, weight spread, a decision-duration histogram; per-target sync errors and
  per-reason event counts.
- A pod whose engine did not report a value has no series for it (absent, not a stale 0).
- A pod that leaves the pool loses all its series on the next decision; a forgotten (deleted)
  pool loses all of its series, while another pool's stay.
- A pool left with no pods keeps no weight spread from the pods it had.
Each test uses its own pool names: the metrics live in prometheus_client's global registry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from trimtab.api.records import Decision, PodDecision, PodName, PodSample, PodState, PoolKey
from trimtab.balancing.telemetry import PoolTelemetry, serve_metrics

NS = "serving"
POD_METRICS = (
    "trimtab_pod_weight",
    "trimtab_pod_max_in_flight",
    "trimtab_pod_running",
    "trimtab_pod_waiting",
    "trimtab_pod_kv_usage",
)
POOL_METRICS = (
    "trimtab_pool_ready_pods",
    "trimtab_pool_metrics_available",
    "trimtab_pool_metrics_age_seconds",
    "trimtab_pool_weight_spread",
)
Labels = frozenset[tuple[str, str]]
Series = dict[tuple[str, Labels], float]


def labels(**pairs: str) -> Labels:
    return frozenset(pairs.items())


def decision(weights: dict[str, int]) -> Decision:
    return Decision(
        pods=tuple(
            PodDecision(PodName(name), weight, 32, PodState.SERVING, "test")
            for name, weight in weights.items()
        )
    )


SAMPLES = {
    PodName("pod-a"): PodSample(running=4, waiting=2, kv_usage=0.75, age_s=1.5),
    PodName("pod-b"): PodSample(running=1, waiting=0, kv_usage=0.25, age_s=0.5),
}


class Scraper:
    def __init__(self, client: httpx.AsyncClient, url: str) -> None:
        self._client = client
        self._url = url

    async def series(self, *, pool: str) -> Series:
        """Every sample of ``pool`` (by its ``pool`` label), keyed by sample name and labels."""
        response = await self._client.get(self._url)
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/plain")
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
            if sample.labels.get("pool") == pool
        }


@pytest_asyncio.fixture()
async def scrape() -> AsyncIterator[Scraper]:
    async with serve_metrics(host="127.0.0.1", port=0) as port, httpx.AsyncClient() as client:
        yield Scraper(client, f"http://127.0.0.1:{port}/metrics")


def observe(telemetry: PoolTelemetry, weights: dict[str, int]) -> None:
    samples = {name: sample for name, sample in SAMPLES.items() if name in weights}
    telemetry.observe_decision(
        decision=decision(weights),
        samples=samples,
        ready_pods=len(weights),
        metrics_available=True,
        duration_s=0.002,
    )


async def test_documented_series_carry_the_decision(scrape: Scraper) -> None:
    telemetry = PoolTelemetry(pool=PoolKey(NS, "documented"))
    observe(telemetry, {"pod-a": 250, "pod-b": 1000})
    telemetry.count_sync_error(target="envoy:llama")
    telemetry.count_event(reason="Rebalanced")
    telemetry.count_event(reason="Rebalanced")
    found = await scrape.series(pool="documented")
    pool = labels(namespace=NS, pool="documented")
    a = labels(namespace=NS, pool="documented", pod="pod-a")
    assert found[("trimtab_pod_weight", a)] == 250
    assert found[("trimtab_pod_max_in_flight", a)] == 32
    assert found[("trimtab_pod_running", a)] == 4
    assert found[("trimtab_pod_waiting", a)] == 2
    assert found[("trimtab_pod_kv_usage", a)] == 0.75
    assert {name for name, _ in found if name in POD_METRICS} == set(POD_METRICS)
    assert found[("trimtab_pool_ready_pods", pool)] == 2
    assert found[("trimtab_pool_metrics_available", pool)] == 1
    assert found[("trimtab_pool_metrics_age_seconds", pool)] == 1.5
    assert found[("trimtab_pool_weight_spread", pool)] == 4.0
    assert found[("trimtab_decision_duration_seconds_count", pool)] == 1
    assert found[("trimtab_decision_duration_seconds_sum", pool)] == pytest.approx(0.002)
    errors = labels(namespace=NS, pool="documented", target="envoy:llama")
    assert found[("trimtab_target_sync_errors_total", errors)] == 1
    events = labels(namespace=NS, pool="documented", reason="Rebalanced")
    assert found[("trimtab_events_total", events)] == 2


async def test_unreported_engine_value_has_no_series(scrape: Scraper) -> None:
    telemetry = PoolTelemetry(pool=PoolKey(NS, "partial"))
    telemetry.observe_decision(
        decision=decision({"pod-a": 1000}),
        samples={PodName("pod-a"): PodSample(running=3)},
        ready_pods=1,
        metrics_available=False,
        duration_s=0.001,
    )
    found = await scrape.series(pool="partial")
    present = {name for name, _ in found}
    assert {"trimtab_pod_weight", "trimtab_pod_running"} <= present
    assert not {"trimtab_pod_waiting", "trimtab_pod_kv_usage"} & present
    assert found[("trimtab_pool_metrics_available", labels(namespace=NS, pool="partial"))] == 0


async def test_pod_that_leaves_loses_its_series(scrape: Scraper) -> None:
    telemetry = PoolTelemetry(pool=PoolKey(NS, "shrinking"))
    observe(telemetry, {"pod-a": 500, "pod-b": 1000})
    observe(telemetry, {"pod-b": 1000})
    pods = {dict(pairs).get("pod") for _, pairs in await scrape.series(pool="shrinking")}
    assert pods == {None, "pod-b"}  # None: the pool-level series


async def test_forgotten_pool_loses_every_series_and_others_stay(scrape: Scraper) -> None:
    gone, kept = PoolTelemetry(pool=PoolKey(NS, "deleted")), PoolTelemetry(pool=PoolKey(NS, "kept"))
    for telemetry in (gone, kept):
        observe(telemetry, {"pod-a": 500, "pod-b": 1000})
        telemetry.count_sync_error(target="envoy:llama")
        telemetry.count_event(reason="MetricsStale")
    assert await scrape.series(pool="deleted")
    gone.forget()
    assert await scrape.series(pool="deleted") == {}
    still = {name for name, _ in await scrape.series(pool="kept")}
    assert {*POD_METRICS, *POOL_METRICS, "trimtab_events_total"} <= still


async def test_pool_left_without_pods_keeps_no_spread(scrape: Scraper) -> None:
    telemetry = PoolTelemetry(pool=PoolKey(NS, "emptied"))
    observe(telemetry, {"pod-a": 250, "pod-b": 1000})
    observe(telemetry, {})
    found = await scrape.series(pool="emptied")
    assert {dict(pairs).get("pod") for _, pairs in found} == {None}
    assert "trimtab_pool_weight_spread" not in {name for name, _ in found}
    assert found[("trimtab_pool_ready_pods", labels(namespace=NS, pool="emptied"))] == 0
