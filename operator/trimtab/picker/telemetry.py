"""The picker's Prometheus metrics (``trimtab_picker_*``), served by trimtab's ``/metrics``.

Counters and the wait histogram are recorded as requests pass; per-pod in-flight and caps and
the queue length are read from each pool's admission at scrape time (:class:`PoolsCollector`),
so a pod or pool that leaves takes its series with it. Fail-open happens in Envoy, not here: a
request the picker never saw shows in Envoy's ``ext_proc`` stats (``failure_mode_allowed``,
``streams_failed``) and in the pool cluster's ``override_host`` fallback picks, not in these.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator

from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from trimtab.picker.pools import PickerPool

__all__ = [
    "PassthroughReason",
    "PickerMetrics",
    "PoolsCollector",
    "StreamEnd",
]


class PassthroughReason(enum.Enum):
    """Why a request went on without a pick (Envoy's fallback policy chose)."""

    UNKNOWN_POOL = "unknown_pool"
    NO_BODY = "no_body"
    """Prefix affinity asked for the request body and none came (override not allowed)."""


class StreamEnd(enum.Enum):
    """How the ext_proc stream of a granted request ended (when its slot was released)."""

    HALF_CLOSE = "half_close"
    """Envoy closed its side: the response ended (or the client went away before it did)."""
    CANCELLED = "cancelled"
    """The stream was reset (Envoy cancelled it, or its connection to the picker broke)."""
    ERROR = "error"
    """Writing to the stream failed."""


class PickerMetrics:
    """The picker's counters and histogram, registered in one registry (one per picker)."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self._registry = registry
        self.grants = Counter(
            "trimtab_picker_grants_total",
            "Requests given an endpoint.",
            ["pool"],
            registry=registry,
        )
        self.refusals = Counter(
            "trimtab_picker_refusals_total",
            "Requests answered by the picker itself (503 no endpoint, 429 shed).",
            ["pool", "reason", "status"],
            registry=registry,
        )
        self.passthrough = Counter(
            "trimtab_picker_passthrough_total",
            "Requests passed on without a pick, left to Envoy's weights.",
            ["pool", "reason"],
            registry=registry,
        )
        self.served_elsewhere = Counter(
            "trimtab_picker_served_elsewhere_total",
            "Responses served by another endpoint than the one picked (a fallback on retry).",
            ["pool"],
            registry=registry,
        )
        self.stream_ends = Counter(
            "trimtab_picker_stream_ends_total",
            "Granted requests whose slot was released, by how their ext_proc stream ended.",
            ["pool", "end"],
            registry=registry,
        )
        self.picks = Counter(
            "trimtab_picker_picks_total",
            "Grants by why their pod: normal, miss, hit, load_guard, no_room (prefix affinity).",
            ["pool", "reason"],
            registry=registry,
        )
        self.prefix_hit_tokens = Counter(
            "trimtab_picker_prefix_hit_tokens_total",
            "Prompt tokens routed to a pod believed to hold them already (prefix affinity).",
            ["pool"],
            registry=registry,
        )
        self.guard_trips = Counter(
            "trimtab_picker_affinity_guard_trips_total",
            "Grants where the pod holding the most of the prefix was beyond the load bound.",
            ["pool"],
            registry=registry,
        )
        self.queue_wait = Histogram(
            "trimtab_picker_queue_wait_seconds",
            "Time a queued request waited in the shared queue until granted or shed.",
            ["pool", "outcome"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=registry,
        )

    def unregister(self) -> None:
        for metric in (
            self.grants,
            self.refusals,
            self.passthrough,
            self.served_elsewhere,
            self.stream_ends,
            self.picks,
            self.prefix_hit_tokens,
            self.guard_trips,
            self.queue_wait,
        ):
            self._registry.unregister(metric)


class PoolsCollector(Collector):
    """Per-pod in-flight and cap and each pool's queue length, read at scrape time."""

    def __init__(self, *, pools: Callable[[], tuple[PickerPool, ...]]) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        in_flight = GaugeMetricFamily(
            "trimtab_picker_pod_in_flight",
            "Requests the picker has admitted to the pod and not yet seen end.",
            labels=["pool", "pod"],
        )
        cap = GaugeMetricFamily(
            "trimtab_picker_pod_cap", "In-flight cap the picker enforces.", labels=["pool", "pod"]
        )
        queue = GaugeMetricFamily(
            "trimtab_picker_queue_length", "Requests waiting in the shared queue.", labels=["pool"]
        )
        for pool in self._pools():
            stats = pool.stats()
            for pod in stats.pods:
                in_flight.add_metric([pool.name, str(pod.name)], pod.in_flight)
                cap.add_metric([pool.name, str(pod.name)], pod.cap)
            queue.add_metric([pool.name], stats.queue_length)
        yield in_flight
        yield cap
        yield queue

    def describe(self) -> Iterator[Metric]:
        return iter(())
