"""Retries through the real Envoy stay inside the cluster's retry budget.

One upstream resets every connection (a retriable ``reset``), the other is slow and counts
the retries it holds at once (``x-envoy-attempt-count`` > 1). With a budget of 0 % and a
minimum concurrency of 2, no more than 2 retries are ever in flight and the rest overflow.
"""

from __future__ import annotations

import pytest

RETRY = {"numRetries": 3, "budgetPercent": 0, "minConcurrency": 2}


@pytest.fixture
def envoy_retry():
    return RETRY


async def test_retries_never_exceed_the_budget(envoy_xds):
    envoy_xds.upstreams["a"].reset = True
    envoy_xds.upstreams["b"].delay = 0.2
    await envoy_xds.apply({"a": 9, "b": 1}, spec=envoy_xds.spec(retry=RETRY))
    await envoy_xds.wait_weights({"a": 9, "b": 1})
    await envoy_xds.send(60, concurrency=30)
    stats = await envoy_xds.envoy.stats("cluster.llama.upstream_rq_retry")
    assert stats["cluster.llama.upstream_rq_retry"] > 0
    assert stats["cluster.llama.upstream_rq_retry_overflow"] > 0
    assert 1 <= envoy_xds.upstreams["b"].max_retries_inflight <= 2
