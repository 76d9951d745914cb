"""trimtab SIGKILLed and started again under load: Envoy keeps serving, weights never reset.

Three emulated replicas, ``trimtab run --local`` and a real Envoy (tests/support/localstack).
Replica 0 is kept busy by long streams sent to it directly, so its weight is well below the
others'. Streaming completions go through Envoy at 4/s; trimtab is SIGKILLed, then started
again on the same ports and status file. Asserted, with Envoy's weights sampled every 0.1 s:
no request failed; while trimtab was down and until its first push after the restart, Envoy
held exactly the weights it had at the kill (the status file lags them by its write throttle,
within 10 %); the restarted trimtab's push reaches Envoy; no sample ever had a weight of zero,
a missing pod, or equal weights (a reset to defaults and back); the first weights pushed after
the restart never lift a weight above twice what it was (a start from defaults would put the
busy replica back at equal weight).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from support.emulators import pinned
from support.localstack import NAMES, LocalStack, WeightLog, local_stack, steady_load, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

RATE_PER_S = 4.0
REQUESTS = 100
KILL_AT_S = 6.0
DOWN_S = 6.0
IN_FLIGHT_PUSH_S = 0.5
"""xDS pushes already sent when trimtab dies may reach Envoy this long after the kill."""


async def test_sigkill_and_restart_under_load(tmp_path: Path) -> None:
    async with (
        local_stack(tmp_path) as stack,
        pinned(stack.pods[0], requests=40, prompt_tokens=8_000, max_tokens=4_000, deadline_s=150.0),
    ):
        await wait_for(stack.unequal, what="replica 0 losing weight", timeout_s=60.0)
        marks: dict[str, float] = {}
        at_kill: dict[str, int] = {}

        assert stack.envoy is not None
        updates_before = await _cds_updates(stack)

        def kill() -> None:
            at_kill.update(stack.status_weights())
            marks["kill"] = loop_time(log)
            stack.kill_trimtab()

        async def restart() -> None:
            await stack.reap_trimtab()
            marks["restart"] = loop_time(log)
            await stack.start_trimtab()

        async with WeightLog(stack) as log:
            outcomes = await steady_load(
                stack.url,
                rate_per_s=RATE_PER_S,
                count=REQUESTS,
                at={KILL_AT_S: kill, KILL_AT_S + DOWN_S: restart},
            )
        assert stack.trimtab is not None and stack.trimtab.returncode is None, stack.log_text()

        async def reconnected() -> bool:
            return await _cds_updates(stack) > updates_before

        # Envoy reconnects with backoff; the restarted trimtab's first push must land.
        await wait_for(reconnected, what="a push from the restarted trimtab", timeout_s=60.0)
        async with WeightLog(stack) as tail:
            await asyncio.sleep(1.0)
        log.samples += [(t + 1e6, w) for t, w in tail.samples]

    failed = [o for o in outcomes if not o.ok]
    print(
        f"requests sent {len(outcomes)}, failed {len(failed)}: {sorted({o.detail for o in failed})}"
    )
    print(f"status weights at the kill {at_kill}; samples {len(log.samples)}")
    assert len(outcomes) == REQUESTS and failed == []
    assert {"kill", "restart"} <= marks.keys()
    assert len(at_kill) == len(NAMES)
    for _, weights in log.samples:
        assert sorted(weights) == sorted(NAMES), weights
        assert min(weights.values()) >= 1, weights
        assert len(set(weights.values())) > 1, f"weights reset to equal: {weights}"
    # A push that left trimtab just before the SIGKILL may land a moment after it.
    dead = marks["kill"] + IN_FLIGHT_PUSH_S
    before = [w for t, w in log.samples if t < dead]
    served = before[-1]
    after_kill = [w for t, w in log.samples if t >= dead]
    print(f"Envoy at the kill {served}; after it {_changes(after_kill)}")
    changed = [i for i, w in enumerate(after_kill) if w != served]
    restart_index = sum(1 for t, _ in log.samples if dead <= t < marks["restart"])
    assert not changed or changed[0] >= restart_index, "weights changed while trimtab was dead"
    held = after_kill[: changed[0]] if changed else after_kill
    assert held and all(w == served for w in held)
    # The restarted trimtab's first push (or, if it equals what Envoy held, the last sample).
    first = after_kill[changed[0]] if changed else after_kill[-1]
    for name in NAMES:
        # A start from defaults would lift the busy pod towards equal weight; the restored
        # start only moves on with fresh readings (its load still grows, so its weight falls).
        assert first[name] <= 2 * max(at_kill[name], served[name]), (first, at_kill, served)


async def _cds_updates(stack: LocalStack) -> int:
    assert stack.envoy is not None
    stats = await stack.envoy.stats("cluster_manager.cds.update_success")
    return stats.get("cluster_manager.cds.update_success", 0)


def _changes(samples: list[dict[str, int]]) -> list[dict[str, int]]:
    return [w for i, w in enumerate(samples) if i == 0 or w != samples[i - 1]]


def loop_time(log: WeightLog) -> float:
    """Seconds on the weight log's clock."""
    return asyncio.get_running_loop().time() - log.started
