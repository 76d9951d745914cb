"""Every replica's /metrics goes dark under load: weights decay to equal, nothing else breaks.

Three emulated replicas, ``trimtab run --local`` (metrics every 500 ms, stale after 3 s, decay
time constant 2 s) and a real Envoy (tests/support/localstack). Replica 0 is kept busy by long
streams sent to it directly, so its weight is low. Streaming completions go through Envoy at
4/s; then every replica's ``/metrics`` drops its connections unanswered (the emulator's
``metrics_refused``) while completions are still served, and later answers again. Asserted,
with Envoy's weights sampled every 0.1 s: no request failed; no pod was ever removed or given
weight zero; by the end of the outage the weights are equal; the pool reports its metrics
unavailable with a bounded message, and available again once they are back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.emulators import pinned
from support.localstack import NAMES, WeightLog, local_stack, steady_load, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RATE_PER_S = 4.0
REQUESTS = 110
BLOCK_AT_S = 4.0
OUTAGE_S = 18.0
#: staleAfter plus five decay time constants: by then a stale weight is within 1 % of equal.
SETTLED_S = 3.0 + 5 * 2.0
_MESSAGE_LIMIT = 1024


async def test_metrics_outage_decays_to_equal(tmp_path: Path) -> None:
    async with (
        local_stack(tmp_path) as stack,
        pinned(stack.pods[0], requests=40, prompt_tokens=8_000, max_tokens=4_000, deadline_s=150.0),
    ):
        before = await wait_for(stack.unequal, what="replica 0 losing weight", timeout_s=60.0)
        marks: dict[str, float] = {}
        seen_unavailable: list[dict[str, str]] = []

        def block() -> None:
            marks["block"] = asyncio.get_running_loop().time() - log.started
            for server in stack.servers:
                server.metrics_refused = True

        def unblock() -> None:
            seen_unavailable.append(stack.condition("MetricsAvailable"))
            marks["unblock"] = asyncio.get_running_loop().time() - log.started
            for server in stack.servers:
                server.metrics_refused = False

        async with WeightLog(stack) as log:
            outcomes = await steady_load(
                stack.url,
                rate_per_s=RATE_PER_S,
                count=REQUESTS,
                at={BLOCK_AT_S: block, BLOCK_AT_S + OUTAGE_S: unblock},
            )
        recovered = await wait_for(
            lambda: stack.condition("MetricsAvailable").get("status") == "True",
            what="MetricsAvailable=True after the outage",
            timeout_s=30.0,
        )
        status_text = stack.status_file.read_text()

    failed = [o for o in outcomes if not o.ok]
    print(
        f"requests sent {len(outcomes)}, failed {len(failed)}: {sorted({o.detail for o in failed})}"
    )
    print(f"weights before {before}; condition during the outage {seen_unavailable}")
    assert len(outcomes) == REQUESTS and failed == []
    assert recovered
    for _, weights in log.samples:
        assert sorted(weights) == sorted(NAMES), weights
        assert min(weights.values()) >= 1, weights
    settled = [w for t, w in log.samples if marks["block"] + SETTLED_S <= t < marks["unblock"]]
    print(f"weights at the end of the outage {settled[-1] if settled else None}")
    assert settled, "the outage was too short to see the weights settle"
    assert len(set(settled[-1].values())) == 1, settled[-1]
    (during,) = seen_unavailable
    assert during.get("status") == "False", during
    assert 0 < len(during.get("message", "x" * _MESSAGE_LIMIT)) < _MESSAGE_LIMIT, during
    assert len(status_text) < 20 * _MESSAGE_LIMIT
