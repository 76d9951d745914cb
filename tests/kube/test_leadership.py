"""Leader election over a Lease in the emulated API: one writer at a time, takeover, silence.

Aspects tested:
- Two :class:`LeaseElector` contenders running their loops: exactly one leads, and it is the
  Lease's ``holderIdentity``; at no sampled moment do both believe they lead.
- When the holder stops renewing (its task is cancelled), the other takes over only after the
  lease duration (the new ``acquireTime`` is at least the old ``renewTime`` plus the duration,
  read from the Lease itself), ``leaseTransitions`` counts the change, and the two never lead
  at once, also for a fractional duration (the Lease holds whole seconds).
- The real operator with ``leader_election`` while another identity holds the Lease balances
  its pool (its target gets decisions) but writes no status and posts no event; once that
  Lease expires it takes over and writes both.
Not tested: API errors during renewal (a leader then steps down by its own clock), clock skew.
Every wait is a bounded poll; no assert is about a duration measured by the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest_asyncio

from kube.conftest import FAST, NAMESPACE, eventually
from support.fakes import FakeMetrics, FakeSources, FakeTargets, RecordingTarget
from support.kube import Cluster
from trimtab.kube.client import KubeApi
from trimtab.kube.leadership import LeaseElector
from trimtab.kube.running import OperatorConfig, run_operator

LEASE_NS = "default"
LEASE = "trimtab-leader"
LEASE_URL = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE}"
LEASES = kmock.resource("coordination.k8s.io/v1/leases")
RENEW_S = 0.2
logger = logging.getLogger(__name__)


def lease_spec(kube: Cluster) -> dict[str, Any]:
    for (resource, ns, name), obj in kube.kube.objects.items():
        if resource == LEASES and (ns, name) == (LEASE_NS, LEASE) and not obj.deleted:
            spec: dict[str, Any] = obj.raw.get("spec", {})
            return spec
    return {}


def parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


async def ok(call: Any) -> None:
    async with call as response:
        assert response.status < 400, await response.text()


@pytest_asyncio.fixture()
async def api(kube: Cluster) -> AsyncIterator[KubeApi]:
    client = KubeApi(connect=lambda: kube.connection)
    yield client
    await client.aclose()


class Contenders:
    """Electors ``a`` and ``b`` each renewing in its own task; all tasks cancelled at exit."""

    def __init__(self, api: KubeApi, *, duration_s: float) -> None:
        self.electors = {
            name: LeaseElector(
                api=api,
                namespace=LEASE_NS,
                name=LEASE,
                identity=name,
                duration_s=duration_s,
                renew_s=RENEW_S,
                logger=logger,
            )
            for name in ("a", "b")
        }
        self.tasks = {
            name: asyncio.create_task(elector.run(), name=f"elector {name}")
            for name, elector in self.electors.items()
        }

    def leaders(self) -> list[str]:
        return [name for name, elector in self.electors.items() if elector.is_leader]

    async def stop(self, name: str) -> None:
        task = self.tasks[name]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def aclose(self) -> None:
        for name in self.tasks:
            await self.stop(name)


@contextlib.asynccontextmanager
async def contenders(api: KubeApi, *, duration_s: float) -> AsyncIterator[Contenders]:
    both = Contenders(api, duration_s=duration_s)
    try:
        yield both
    finally:
        await both.aclose()


async def one_leader(both: Contenders) -> str:
    """Poll until exactly one leads; fail at once if both ever do."""

    def check() -> str | None:
        leaders = both.leaders()
        assert len(leaders) <= 1, f"two leaders at once: {leaders}"
        return leaders[0] if leaders else None

    leader: str = await eventually(check, within=10.0)
    return leader


async def one_leader_named(both: Contenders, name: str) -> None:
    def check() -> bool:
        leaders = both.leaders()
        assert len(leaders) <= 1, f"two leaders at once: {leaders}"
        return leaders == [name]

    await eventually(check, within=10.0)


async def test_exactly_one_contender_holds_the_lease(kube: Cluster, api: KubeApi) -> None:
    async with contenders(api, duration_s=2.0) as both:
        leader = await one_leader(both)
        for _ in range(10):  # several renew rounds: the same one, alone, keeps it
            await asyncio.sleep(RENEW_S)
            assert both.leaders() == [leader]
        assert lease_spec(kube)["holderIdentity"] == leader


async def test_other_takes_over_after_the_duration_when_holder_stops(
    kube: Cluster, api: KubeApi
) -> None:
    async with contenders(api, duration_s=1.5) as both:
        old = await one_leader(both)
        new = "b" if old == "a" else "a"
        await both.stop(old)
        last_renewal = lease_spec(kube)["renewTime"]
        # The stopped one leads until its own deadline; the other one only after that.
        await one_leader_named(both, new)
        lease = lease_spec(kube)
    assert lease["holderIdentity"] == new
    assert lease["leaseTransitions"] == 1
    waited = parse_time(lease["acquireTime"]) - parse_time(last_renewal)
    assert waited >= datetime.timedelta(seconds=1.5), lease


async def test_non_leader_writes_no_status_or_events_until_it_leads(kube: Cluster) -> None:
    # Another replica holds the Lease, freshly renewed, for an hour.
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    held = {"holderIdentity": "other", "leaseDurationSeconds": 3600, "renewTime": now}
    body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE}}
    url = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"
    await ok(kube.kube.post(url, json={**body, "spec": held}))
    metrics, target = FakeMetrics(down=True), RecordingTarget()
    config = OperatorConfig(
        namespaces=[NAMESPACE],
        connection=kube.connection,
        loop=FAST,
        scanning=False,
        leader_election=True,
        lease_namespace=LEASE_NS,
        identity="me",
    )
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_operator(
            config=config, stop=stop, sources=FakeSources(metrics), targets=FakeTargets(target)
        ),
        name="operator under test",
    )
    try:
        await kube.put_pod(namespace=NAMESPACE, name="pod-0", labels={"app": "vllm"}, ip="10.0.0.1")
        spec = {
            "selector": {"matchLabels": {"app": "vllm"}},
            "metrics": {"interval": "200ms", "staleAfter": "1s"},
            "policy": {"slowStart": "0s"},
            "targets": [{"envoy": {"cluster": "llama"}}],
        }
        await kube.create_pool(namespace=NAMESPACE, name="llama", spec=spec)
        # Balancing goes on, with MetricsStale due on the first tick: a leader would post it.
        await eventually(lambda: len(target.applied) >= 5)
        assert "status" not in (kube.pool(namespace=NAMESPACE, name="llama") or {})
        assert kube.events(namespace=NAMESPACE) == []
        # The holder stops renewing: its Lease runs out and this replica takes over.
        patch = {"spec": {"leaseDurationSeconds": 1}}
        headers = {"Content-Type": "application/merge-patch+json"}
        await ok(kube.kube.patch(LEASE_URL, json=patch, headers=headers))
        await eventually(lambda: lease_spec(kube).get("holderIdentity") == "me")
        metrics.down = False
        await eventually(lambda: kube.events(namespace=NAMESPACE, reason="MetricsRecovered"))
        await eventually(lambda: (kube.pool(namespace=NAMESPACE, name="llama") or {}).get("status"))
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, timeout=20)
