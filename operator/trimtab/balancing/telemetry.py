"""trimtab's own Prometheus metrics, and the HTTP endpoint that serves them.

The names are an interface: the Helm chart's dashboards and alerts use them verbatim. Each
pool's :class:`PoolTelemetry` remembers which series it set, so a pod that leaves or a pool
that is deleted takes its series with it instead of freezing at the last value.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping

import aiohttp.web
import prometheus_client
from prometheus_client import Counter, Gauge, Histogram

from trimtab.api.records import Decision, PodName, PodSample, PoolKey

__all__ = ["PoolTelemetry", "serve_metrics"]

_POD = ["namespace", "pool", "pod"]
_POOL = ["namespace", "pool"]

POD_WEIGHT = Gauge("trimtab_pod_weight", "Envoy weight decided for the pod.", _POD)
POD_MAX_IN_FLIGHT = Gauge("trimtab_pod_max_in_flight", "In-flight cap of the pod.", _POD)
POD_RUNNING = Gauge("trimtab_pod_running", "Requests running in the pod's engine.", _POD)
POD_WAITING = Gauge("trimtab_pod_waiting", "Requests waiting in the pod's engine.", _POD)
POD_KV_USAGE = Gauge("trimtab_pod_kv_usage", "KV-cache usage of the pod, 0..1.", _POD)
POOL_READY_PODS = Gauge("trimtab_pool_ready_pods", "Ready members of the pool.", _POOL)
POOL_METRICS_AVAILABLE = Gauge(
    "trimtab_pool_metrics_available", "1 when the last metrics read succeeded, else 0.", _POOL
)
POOL_METRICS_AGE = Gauge(
    "trimtab_pool_metrics_age_seconds", "Age of the oldest sample used in a decision.", _POOL
)
POOL_WEIGHT_SPREAD = Gauge(
    "trimtab_pool_weight_spread", "Highest weight divided by lowest weight.", _POOL
)
DECISION_DURATION = Histogram(
    "trimtab_decision_duration_seconds",
    "Time to compute one pool decision.",
    _POOL,
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
TARGET_SYNC_ERRORS = Counter(
    "trimtab_target_sync_errors_total", "Failed target applies.", [*_POOL, "target"]
)
EVENTS = Counter("trimtab_events_total", "Kubernetes events emitted.", [*_POOL, "reason"])

_POD_GAUGES = (POD_WEIGHT, POD_MAX_IN_FLIGHT, POD_RUNNING, POD_WAITING, POD_KV_USAGE)
_POOL_METRICS = (
    POOL_READY_PODS,
    POOL_METRICS_AVAILABLE,
    POOL_METRICS_AGE,
    POOL_WEIGHT_SPREAD,
    DECISION_DURATION,
)


class PoolTelemetry:
    """The series of one pool; :meth:`forget` removes all of them."""

    def __init__(self, *, pool: PoolKey) -> None:
        self._labels = (pool.namespace, pool.name)
        self._pods: set[PodName] = set()
        self._targets: set[str] = set()
        self._reasons: set[str] = set()

    def observe_decision(
        self,
        *,
        decision: Decision,
        samples: Mapping[PodName, PodSample],
        ready_pods: int,
        metrics_available: bool,
        duration_s: float,
    ) -> None:
        ns, pool = self._labels
        DECISION_DURATION.labels(ns, pool).observe(duration_s)
        POOL_READY_PODS.labels(ns, pool).set(ready_pods)
        POOL_METRICS_AVAILABLE.labels(ns, pool).set(1 if metrics_available else 0)
        ages = [s.age_s for s in samples.values() if s.age_s is not None]
        POOL_METRICS_AGE.labels(ns, pool).set(max(ages, default=0.0))
        weights = [pod.weight for pod in decision.pods]
        if weights:
            POOL_WEIGHT_SPREAD.labels(ns, pool).set(max(weights) / max(1, min(weights)))
        else:  # no pods left: a spread frozen at the old pods' value would keep alerts firing
            _discard(POOL_WEIGHT_SPREAD, ns, pool)
        current = {pod.name for pod in decision.pods}
        for gone in self._pods - current:
            self._remove_pod(gone)
        self._pods = current
        for pod in decision.pods:
            sample = samples.get(pod.name) or PodSample()
            POD_WEIGHT.labels(ns, pool, pod.name).set(pod.weight)
            POD_MAX_IN_FLIGHT.labels(ns, pool, pod.name).set(pod.max_in_flight)
            for gauge, value in (
                (POD_RUNNING, sample.running),
                (POD_WAITING, sample.waiting),
                (POD_KV_USAGE, sample.kv_usage),
            ):
                if value is None:
                    _discard(gauge, ns, pool, pod.name)
                else:
                    gauge.labels(ns, pool, pod.name).set(value)

    def count_sync_error(self, *, target: str) -> None:
        self._targets.add(target)
        TARGET_SYNC_ERRORS.labels(*self._labels, target).inc()

    def count_event(self, *, reason: str) -> None:
        self._reasons.add(reason)
        EVENTS.labels(*self._labels, reason).inc()

    def forget(self) -> None:
        for pod in self._pods:
            self._remove_pod(pod)
        self._pods = set()
        for metric in _POOL_METRICS:
            _discard(metric, *self._labels)
        for target in self._targets:
            _discard(TARGET_SYNC_ERRORS, *self._labels, target)
        for reason in self._reasons:
            _discard(EVENTS, *self._labels, reason)

    def _remove_pod(self, pod: PodName) -> None:
        for gauge in _POD_GAUGES:
            _discard(gauge, *self._labels, pod)


def _discard(metric: Gauge | Counter | Histogram, *labels: str) -> None:
    # remove() raises KeyError for a series that was never set; absence is what we want.
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


@contextlib.asynccontextmanager
async def serve_metrics(*, host: str = "0.0.0.0", port: int) -> AsyncIterator[int]:
    """Serve ``/metrics`` (with the process metrics) until the context exits; yield the port."""

    async def handle(request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = prometheus_client.generate_latest(prometheus_client.REGISTRY)
        return aiohttp.web.Response(
            body=body, headers={"Content-Type": prometheus_client.CONTENT_TYPE_LATEST}
        )

    app = aiohttp.web.Application()
    app.router.add_get("/metrics", handle)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, host=host, port=port)
    await site.start()
    try:
        server = site._server  # the bound port when 0 was asked (tests)
        sockets = getattr(server, "sockets", None) or []
        yield sockets[0].getsockname()[1] if sockets else port
    finally:
        await runner.cleanup()
