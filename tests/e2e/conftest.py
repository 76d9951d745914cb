"""Fixtures of the end-to-end tests: everything real except the Kubernetes API server.

``kube`` is the emulated API (:mod:`support.kube`); ``pods`` are three emulated vLLM replicas
on 127.0.0.2-4 with one shared port, registered as Ready pods; ``prometheus`` scrapes them
with ``namespace``/``pod`` target labels; ``metrics`` is each source in turn (a Prometheus of
its own, or ``direct``); ``operator`` is the real kopf operator with its built-in metrics
sources and targets, on its own event loop in a thread (only the loop's timings are
shortened). Every fixture stops what it started, also when the test fails.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import pytest_asyncio

from support.emulators import Pod, serve_pods
from support.kube import Cluster, kube  # noqa: F401  # re-exported fixture
from support.prometheus import Prometheus, ScrapeTarget, require_prometheus, run_prometheus
from trimtab.balancing.loop import LoopSettings
from trimtab.balancing.reporting import ReportSettings
from trimtab.balancing.sources import PrometheusUrlRule, SourceSettings
from trimtab.kube.running import OperatorConfig, run_operator

NAMESPACE = "serving"
POOL = "llama"
LABELS = {"app": "vllm-llama"}
POD_NAMES = ("vllm-0", "vllm-1", "vllm-2")
# By default weight moves reach the status at most every 5 s and small ones only with the
# 60 s heartbeat; shorter periods keep every test within seconds. Only timings differ from
# the shipped operator.
LOOP = LoopSettings(
    target_timeout_s=2.0,
    target_backoffs=(0.1, 0.2),
    read_timeout_floor_s=1.0,
    invalid_recheck_s=0.2,
    report=ReportSettings(min_write_interval_s=0.2, heartbeat_s=5.0),
)
_STOP_TIMEOUT_S = 20.0

T = TypeVar("T")


async def eventually(check: Callable[[], T], *, timeout_s: float = 20.0, what: str = "") -> T:
    """Poll ``check`` every 0.1 s until it returns something truthy; fail with its last value."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"{what or 'condition'} not met in {timeout_s}s; last {result!r}")
        await asyncio.sleep(0.1)


def pool_spec(*, port: int, source: str, prometheus_url: str | None = None) -> dict[str, Any]:
    """The pool under test: 500 ms cycles, stale after 3 s, fast policy, one Envoy cluster."""
    metrics: dict[str, Any] = {"source": source, "interval": "500ms", "staleAfter": "3s"}
    if prometheus_url is not None:
        metrics["prometheus"] = {"url": prometheus_url, "timeout": "1s"}
    return {
        "selector": {"matchLabels": LABELS},
        "targetPorts": [{"number": port}],
        "engine": "vllm",
        "metrics": metrics,
        # Weights react at a test's pace: the load below fills ~25 % of one pod's KV, so the
        # equal-weights band ends at 10 %, and smoothing/decay take seconds, not half a minute.
        "policy": {
            "slowStart": "0s",
            "kvLowWatermark": 0.1,
            "smoothing": "2s",
            "staleDecay": "2s",
        },
        # No Envoy connects: the built-in xDS cache is fed all the same, and the status is
        # what these tests read.
        "targets": [{"envoy": {"cluster": POOL}}],
    }


def status(kube: Cluster) -> dict[str, Any]:  # noqa: F811
    found: dict[str, Any] = (kube.pool(namespace=NAMESPACE, name=POOL) or {}).get("status", {})
    return found


def weights(kube: Cluster) -> dict[str, int]:  # noqa: F811
    return {row["name"]: row["weight"] for row in status(kube).get("pods", [])}


def condition(kube: Cluster, kind: str) -> dict[str, Any]:  # noqa: F811
    found = [c for c in status(kube).get("conditions", []) if c.get("type") == kind]
    return found[0] if found else {}


def scrape_targets(pods: list[Pod]) -> list[ScrapeTarget]:
    """One target per pod, with the target labels a Kubernetes service discovery adds."""
    return [
        ScrapeTarget(address=p.ip, port=p.port, labels={"namespace": NAMESPACE, "pod": p.name})
        for p in pods
    ]


@pytest_asyncio.fixture()
async def pods(kube: Cluster) -> AsyncIterator[list[Pod]]:  # noqa: F811
    """Three emulated vLLM replicas, each also a Ready pod (podIP = its address) in ``kube``."""
    async with serve_pods(names=POD_NAMES) as served:
        for pod in served:
            await kube.put_pod(namespace=NAMESPACE, name=pod.name, labels=LABELS, ip=pod.ip)
        yield served


@pytest_asyncio.fixture()
async def prometheus(pods: list[Pod], tmp_path: Path) -> AsyncIterator[Prometheus]:
    """A real Prometheus scraping every pod each second, labelled as in a cluster."""
    binary = require_prometheus()
    targets = scrape_targets(pods)
    async with run_prometheus(targets=targets, workdir=tmp_path / "prometheus", binary=binary) as p:
        yield p


@dataclass(frozen=True, kw_only=True)
class Metrics:
    """How the pool under test reads its pods: the source and, for Prometheus, its URL."""

    source: str
    url: str | None = None


@pytest_asyncio.fixture(params=["prometheus", "direct"])
async def metrics(
    request: pytest.FixtureRequest, pods: list[Pod], tmp_path: Path
) -> AsyncIterator[Metrics]:
    """Each metrics source in turn; ``prometheus`` starts a real one scraping the pods."""
    if request.param == "direct":
        yield Metrics(source="direct")
        return
    binary = require_prometheus()
    async with run_prometheus(
        targets=scrape_targets(pods), workdir=tmp_path / "prometheus", binary=binary
    ) as server:
        yield Metrics(source="prometheus", url=server.url)


class OperatorThread:
    """The operator on its own event loop in a thread, as ``kopf.testing.KopfRunner`` runs it.

    kopf's :func:`kopf.operator` cancels every task of its loop that it did not find at
    startup once it stops (and first waits 5 s for them): on the test's loop that would be
    the fixture teardown itself and the API emulator's open watch streams.
    """

    def __init__(self, *, config: OperatorConfig) -> None:
        self._config = config
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="operator under test", daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._started.wait(timeout=_STOP_TIMEOUT_S):
            raise RuntimeError("the operator thread did not start")

    async def stop(self) -> None:
        """Set the stop flag and wait for the operator's loop to end; re-raise its failure."""
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended on its own meanwhile
                self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self._thread.join, _STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise AssertionError(f"the operator did not stop within {_STOP_TIMEOUT_S}s")
        if self.error is not None:
            raise AssertionError("the operator failed") from self.error

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported by stop(), in the test's thread
            self.error = exc

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        await run_operator(config=self._config, stop=self._stop)


@pytest_asyncio.fixture()
async def operator(kube: Cluster) -> AsyncIterator[OperatorThread]:  # noqa: F811
    """The real kopf operator with its built-in sources and targets, serving ``NAMESPACE``."""
    config = OperatorConfig(
        namespaces=[NAMESPACE],
        connection=kube.connection,
        loop=LOOP,
        scanning=False,
        # The test Prometheus listens on a free port of 127.0.0.1: allow that host, any port.
        source_settings=SourceSettings(
            prometheus_urls=(PrometheusUrlRule.parse("http://127.0.0.1"),)
        ),
    )
    runner = OperatorThread(config=config)
    runner.start()
    try:
        yield runner
    finally:
        await runner.stop()
