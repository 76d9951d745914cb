"""trimtab's xDS server driving the real Envoy 1.40.

Covered: pushed weights appear in /clusters and traffic follows them; no upstream ever sees
more in-flight requests than the per-host cap; Envoy keeps serving with the same weights when
the xDS server dies; a new server that is not ready does not reset them until it is given the
real decision; a cluster change gets its endpoints at once (the EDS re-request); a NACKed
cluster is reported and the previous config keeps serving. Statistical checks use wide margins.
"""

from __future__ import annotations

import asyncio

import httpx

from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import XdsServer


def _served_by(responses):
    counts: dict[str, int] = {}
    for response in responses:
        assert isinstance(response, httpx.Response), response
        assert response.status_code == 200, response.text
        counts[response.text] = counts.get(response.text, 0) + 1
    return counts


async def test_weights_reach_envoy_and_traffic_follows(envoy_xds):
    await envoy_xds.apply({"a": 1, "b": 4})
    await envoy_xds.wait_weights({"a": 1, "b": 4})
    counts = _served_by(await envoy_xds.send(300, concurrency=4))
    # Expected share of b: 0.8 (bias 0 follows the weights exactly); allow a wide margin.
    assert 0.65 < counts.get("b", 0) / 300 < 0.92


async def test_no_upstream_exceeds_its_cap(envoy_xds):
    for upstream in envoy_xds.upstreams.values():
        upstream.delay = 0.05
    await envoy_xds.apply({"a": 1, "b": 1}, caps={"a": 3, "b": 3})
    await envoy_xds.wait_weights({"a": 1, "b": 1})
    _served_by(await envoy_xds.send(120, concurrency=30))
    assert max(u.max_inflight for u in envoy_xds.upstreams.values()) == 3


async def test_envoy_serves_on_when_the_xds_server_dies(envoy_xds):
    await envoy_xds.apply({"a": 2, "b": 3})
    await envoy_xds.wait_weights({"a": 2, "b": 3})
    load = asyncio.create_task(envoy_xds.send(200, concurrency=8), name="test-load")
    await envoy_xds.server.stop(grace=0)
    _served_by(await load)
    _served_by(await envoy_xds.send(20, concurrency=4))
    await envoy_xds.wait_weights({"a": 2, "b": 3})


async def test_restarted_server_waits_for_the_real_decision(envoy_xds):
    await envoy_xds.apply({"a": 2, "b": 7})
    await envoy_xds.wait_weights({"a": 2, "b": 7})
    await envoy_xds.server.stop(grace=0)
    # A new instance on the same port; its pool is set but its gate is still closed.
    cache = SnapshotCache()
    server = XdsServer(cache=cache)
    envoy_xds.server = server
    await server.start(host="127.0.0.1", port=envoy_xds.xds_port)
    target = EnvoyXdsTarget(cache=cache, cluster="llama")
    envoy_xds.target = target
    envoy_xds.cache = cache
    await envoy_xds.apply({"a": 1, "b": 1})
    for _ in range(400):  # bounded: Envoy reconnects after its backoff (< 10 s)
        if cache.acks.streams():
            break
        await asyncio.sleep(0.025)
    assert cache.acks.streams(), "Envoy did not reconnect"
    assert await envoy_xds.envoy.host_weights("llama") == {
        envoy_xds.address("a"): 2,
        envoy_xds.address("b"): 7,
    }
    assert target.state(pool=envoy_xds.pool).reason == "XdsNotReady"
    await envoy_xds.apply({"a": 3, "b": 7})
    cache.open()
    await envoy_xds.wait_weights({"a": 3, "b": 7})


async def test_cluster_change_gets_endpoints_without_the_initial_fetch_wait(envoy_xds):
    await envoy_xds.wait_weights({"a": 1, "b": 1})
    # New caps (a CDS change) and new weights together: the warming cluster needs EDS again.
    await envoy_xds.apply({"a": 1, "b": 6}, caps={"a": 10, "b": 10})
    await envoy_xds.wait_weights({"a": 1, "b": 6})
    stats = await envoy_xds.envoy.stats("cluster.llama.init_fetch_timeout")
    assert stats.get("cluster.llama.init_fetch_timeout", 0) == 0


async def test_nack_is_reported_and_old_config_keeps_serving(envoy_xds):
    await envoy_xds.apply({"a": 1, "b": 3})
    await envoy_xds.wait_weights({"a": 1, "b": 3})
    # choice_count 1 passes the proto (model_copy skips pydantic) but fails Envoy's validation.
    good = envoy_xds.spec()
    bad = good.model_copy(update={"policy": good.policy.model_copy(update={"choice_count": 1})})
    await envoy_xds.apply({"a": 1, "b": 3}, spec=bad)
    for _ in range(400):  # bounded: Envoy answers within milliseconds
        state = envoy_xds.target.state(pool=envoy_xds.pool)
        if state.reason == "EnvoyNack":
            break
        await asyncio.sleep(0.025)
    assert state.reason == "EnvoyNack"
    # Capped to head and tail: Envoy's reason comes last, after the rejected proto.
    assert "ChoiceCount: value must be greater than or equal to 2" in state.message
    assert _served_by(await envoy_xds.send(20, concurrency=4))
    dump = await envoy_xds.envoy.client.get(f"{envoy_xds.envoy.admin_url}/config_dump")
    assert '"choice_count": 2' in dump.text
