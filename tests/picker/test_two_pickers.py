"""Two trimtab replicas, one picker each: the caps stay exact in total.

Design (docs/picker.md): every replica serves the picker, but only the Lease holder reports
``readiness`` SERVING; Envoy health-checks the picker cluster (panic routing off) and sends
every ext_proc stream to the ready one, so one admission counts all of a pod's requests. Here
both pickers run in-process, one ready; a hand-over flips readiness as a Lease takeover does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from trimtab.admission import AdmissionSettings, PodCapacity
from trimtab.api.records import PodName
from trimtab.picker import PickerServer, serve_picker

from .conftest import CLUSTER, PickerEnv, SseUpstream, picker_env

pytestmark = pytest.mark.slow

CAPS = {"a": 2, "b": 2, "c": 2}
SETTINGS = AdmissionSettings(queue_length=500, queue_ttl_s=60)


def _add_second_picker(port: int) -> Any:
    def edit(config: dict[str, Any], upstreams: dict[str, SseUpstream]) -> None:
        for cluster in config["static_resources"]["clusters"]:
            if cluster["name"] == "trimtab_picker":
                endpoints = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"]
                second = {
                    "endpoint": {
                        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}
                    }
                }
                endpoints.append(second)
                return
        raise AssertionError("no picker cluster in the bootstrap")

    return edit


def _feed(picker: PickerServer, upstreams: dict[str, SseUpstream]) -> None:
    pods = [
        PodCapacity(name=PodName(n), address=upstreams[n].address, cap=c) for n, c in CAPS.items()
    ]
    picker.pools.update(pool=CLUSTER, pods=pods, settings=SETTINGS, now=time.monotonic())


async def _load(env: PickerEnv, *, count: int) -> list[object]:
    semaphore = asyncio.Semaphore(20)
    headers = {"x-test-chunks": "4", "x-test-interval-ms": "20"}

    async def one() -> object:
        async with semaphore:
            try:
                return (await env.get(headers=headers)).status_code
            except httpx.HTTPError as exc:
                return repr(exc)

    return list(await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), 120))


def _grants(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("trimtab_picker_grants_total", {"pool": CLUSTER}) or 0.0


async def _only_ready_one_healthy(env: PickerEnv, ready_port: int) -> None:
    for _ in range(400):  # bounded: health checks run every 0.2 s
        data = (await env.envoy.client.get(f"{env.envoy.admin_url}/clusters?format=json")).json()
        for status in data["cluster_statuses"]:
            if status["name"] != "trimtab_picker":
                continue
            healthy = [
                h["address"]["socket_address"]["port_value"]
                for h in status["host_statuses"]
                if h["health_status"].get("eds_health_status") == "HEALTHY"
                and len(h["health_status"]) == 1
            ]
            if healthy == [ready_port]:
                return
        await asyncio.sleep(0.05)
    raise AssertionError("Envoy never saw exactly the ready picker healthy")


async def test_only_the_ready_picker_admits_and_caps_hold_in_total(tmp_path):
    second_registry = CollectorRegistry()
    async with (
        serve_picker(host="127.0.0.1", port=0, ready=False, registry=second_registry) as second,
        picker_env(
            tmp_path, caps=CAPS, settings=SETTINGS, edit=_add_second_picker(second.port)
        ) as env,
    ):
        _feed(second, env.upstreams)
        await _only_ready_one_healthy(env, env.picker.port)
        assert await _load(env, count=90) == [200] * 90
        assert {n: u.max_inflight for n, u in env.upstreams.items()} == CAPS
        assert _grants(env.registry) == 90
        assert _grants(second_registry) == 0

        # A Lease takeover: the old leader turns unready, the new one ready. Until Envoy's
        # health checks and workers follow, streams fail open to the weights (uncapped).
        await env.settle(lambda: sum(env.in_flight().values()) == 0, what="drained")
        await env.picker.set_ready(False)
        await second.set_ready(True)
        await _only_ready_one_healthy(env, second.port)
        # Each Envoy worker follows the health checks on its own: wait until a run of probes
        # is picked entirely by the new leader (bounded).
        for _ in range(20):
            before = _grants(second_registry)
            for _ in range(10):
                assert (await env.get()).status_code == 200
            if _grants(second_registry) - before == 10:
                break
        else:
            raise AssertionError("the new leader never picked every request")
        # The sequential probes may still reach the old picker now and then; the load may not.
        granted, granted_before = _grants(second_registry), _grants(env.registry)
        for upstream in env.upstreams.values():
            upstream.max_inflight = 0
        assert await _load(env, count=60) == [200] * 60
        assert {n: u.max_inflight for n, u in env.upstreams.items()} == CAPS
        assert _grants(second_registry) == granted + 60
        assert _grants(env.registry) == granted_before
