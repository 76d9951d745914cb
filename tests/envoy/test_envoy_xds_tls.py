"""The real Envoy over mTLS to trimtab's xDS server, with ``envoy-bootstrap``'s client TLS.

Covered: an Envoy presenting a certificate of the configured CA gets its cluster and the
condition becomes Synced; an Envoy bootstrapped without TLS, and one whose certificate comes
from another CA, never get the cluster (the server refuses the handshake) and no stream of
theirs is ever recorded. Certificates are made in the test.
"""

from __future__ import annotations

import asyncio

from support.certs import Leaf, make_authority
from trimtab.api.records import Decision, Endpoint, PodDecision, PodName, PodState, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.bootstrap import (
    BootstrapCluster,
    BootstrapOptions,
    XdsClientTls,
    build_bootstrap,
)
from trimtab.targets.envoy_xds import EnvoyXdsTarget
from trimtab.targets.xds.cache import SnapshotCache
from trimtab.targets.xds.server import ServerTls, XdsSecurity, XdsServer

POOL = PoolKey("serving", "llama")
CLUSTER = "llama"


def _bootstrap(*, port, node, tls=None):
    return build_bootstrap(
        BootstrapOptions(
            clusters=(BootstrapCluster(name=CLUSTER),),
            xds_port=port,
            listener_address="127.0.0.1",
            listener_port=0,
            admin_port=0,
            node_id=node,
            xds_tls=tls,
        )
    )


def _client_tls(leaf: Leaf, ca) -> XdsClientTls:
    return XdsClientTls(cert=str(leaf.cert), key=str(leaf.key), ca=str(ca.cert))


async def test_envoy_with_a_client_certificate_is_served_and_others_are_not(
    tmp_path, upstreams, envoy_factory
):
    ca = make_authority(tmp_path / "ca")
    server_leaf = ca.issue("trimtab", server=True)
    other_ca = make_authority(tmp_path / "other", name="other-ca")
    cache = SnapshotCache()
    target = EnvoyXdsTarget(cache=cache, cluster=CLUSTER)
    spec = InferencePoolSpec.model_validate(
        {
            "endpoints": [{"name": "a", "address": "127.0.0.1", "port": 8000}],
            "targets": [{"envoy": {"cluster": CLUSTER}}],
        }
    )
    endpoints = {
        PodName(n): Endpoint(PodName(n), "127.0.0.1", u.port) for n, u in upstreams.items()
    }
    await target.apply(
        pool=POOL,
        spec=spec,
        decision=Decision(
            pods=tuple(PodDecision(PodName(n), 3, 8, PodState.SERVING, "test") for n in upstreams)
        ),
        endpoints=endpoints,
    )
    cache.open()
    tls = ServerTls(cert=server_leaf.cert, key=server_leaf.key, client_ca=ca.cert)
    server = XdsServer(cache=cache, security=XdsSecurity(tls=tls))
    port = await server.start(host="127.0.0.1", port=0)
    try:
        plain = await envoy_factory(_bootstrap(port=port, node="plaintext"))
        stranger = await envoy_factory(
            _bootstrap(
                port=port,
                node="stranger",
                tls=_client_tls(other_ca.issue("stranger", server=False), ca),
            )
        )
        good = await envoy_factory(
            _bootstrap(port=port, node="good", tls=_client_tls(ca.issue("good", server=False), ca))
        )
        for _ in range(400):  # bounded: Envoy connects and ACKs within a second or two
            if target.state(pool=POOL).synced:
                break
            await asyncio.sleep(0.025)
        assert target.state(pool=POOL).reason == "Synced"
        assert len(await good.host_weights(CLUSTER)) == len(upstreams)
        # The refused ones have retried by now (Envoy backs off from 500 ms).
        await asyncio.sleep(1.5)
        assert await plain.host_weights(CLUSTER) == {}
        assert await stranger.host_weights(CLUSTER) == {}
        assert {s.node for s in cache.acks.streams()} == {"good"}
    finally:
        await server.stop(grace=0)
