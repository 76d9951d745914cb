"""File-based EDS with the real Envoy: a ClusterLoadAssignment replaced by rename is picked up.

The target writes the file before Envoy starts (Envoy refuses a missing path), then a new
decision replaces it by rename and Envoy's directory watch applies the new weights.
"""

from __future__ import annotations

import asyncio

from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.bootstrap import BootstrapCluster, BootstrapOptions, build_bootstrap
from trimtab.targets.envoy_file import EdsFileTarget


async def test_envoy_picks_up_a_replaced_file(tmp_path, upstreams, envoy_factory):
    eds_dir = tmp_path / "eds"
    target = EdsFileTarget(cluster="llama", path=eds_dir / "llama.json")
    endpoints = {
        PodName(n): Endpoint(PodName(n), "127.0.0.1", u.port) for n, u in upstreams.items()
    }
    spec, pool = _spec(), _pool()
    await target.apply(pool=pool, spec=spec, decision=_decision(1, 1), endpoints=endpoints)
    envoy = await envoy_factory(_bootstrap(str(eds_dir)))
    await target.apply(pool=pool, spec=spec, decision=_decision(2, 5), endpoints=endpoints)
    expected = {f"127.0.0.1:{upstreams['a'].port}": 2, f"127.0.0.1:{upstreams['b'].port}": 5}
    for _ in range(400):  # bounded: the directory watch fires within milliseconds
        if await envoy.host_weights("llama") == expected:
            break
        await asyncio.sleep(0.025)
    assert await envoy.host_weights("llama") == expected


def _spec():
    return InferencePoolSpec.model_validate(
        {
            "endpoints": [{"name": "a", "address": "127.0.0.1", "port": 1}],
            "targets": [{"envoyFile": {"cluster": "llama", "path": "/eds/llama.json"}}],
        }
    )


def _pool():
    return PoolKey("serving", "llama")


def _decision(a, b):
    return Decision(
        pods=(
            PodDecision(PodName("a"), a, 8, PodState.SERVING, "test"),
            PodDecision(PodName("b"), b, 8, PodState.SERVING, "test"),
        )
    )


def _bootstrap(eds_dir):
    return build_bootstrap(
        BootstrapOptions(
            clusters=(BootstrapCluster(name="llama"),),
            listener_address="127.0.0.1",
            listener_port=0,
            admin_port=0,
            eds_dir=eds_dir,
        )
    )
