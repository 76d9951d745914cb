"""trimtab SIGKILLed mid-run behind the picker fails no request: Envoy fails open to weights.

The demo's ``trimtab_picker`` stack: three emulated vLLM replicas, the real ``trimtab run
--local`` serving both xDS and the endpoint picker, and Envoy bootstrapped with ``--picker``
(ext_proc with ``failure_mode_allow``, ``override_host`` falling back to least-request on the
EDS weights). The picker lives inside trimtab, so killing it kills xDS too: Envoy keeps its
last clusters (fail static) and routes by their weights. Caps are small (two per pod), so
requests may be waiting in the picker's queue when it dies.

Streaming completions arrive at ``RATE_PER_S``; ``KILL_AT_S`` in, trimtab's process group gets
SIGKILL. Asserted: every request ends in a complete stream (none failed, none cut), the picker
handled requests before the kill (Envoy's ext_proc streams, none failed open) and requests
failed open after it. Printed (run with ``-s``): how long after the kill the first request
sent after it got its first token, and the TTFTs before and after.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from trimtab_lab.demo.loadgen import Outcome, RequestSpec, replay
from trimtab_lab.demo.stack import Mode, StackPlan, start_stack
from trimtab_lab.emulator.fleet import DEFAULT_MODEL
from trimtab_lab.processes import ProcessGroup

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

RATE_PER_S = 20.0
REQUESTS = 240
KILL_AT_S = 4.0
DEADLINE_S = 40.0


async def _ext_proc_stats(client: httpx.AsyncClient, admin_url: str) -> dict[str, int]:
    """Envoy's ext_proc counters summed over filters, by their last name component."""
    text = (await client.get(f"{admin_url}/stats", params={"filter": "ext_proc"})).text
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if value.strip().isdigit():
            key = name.rsplit(".", 1)[-1]
            found[key] = found.get(key, 0) + int(value)
    return found


async def test_killing_trimtab_fails_no_request_and_routing_falls_back(tmp_path: Path) -> None:
    plan = StackPlan(
        speeds=(1.0, 1.0, 0.6),
        profile="llama3-8b-a10g",
        time_scale=10.0,
        metrics_interval_s=0.1,
        policy={"slowStart": "0s", "maxInFlightPerPod": 2, "minInFlightPerPod": 1},
    )
    requests = [
        RequestSpec(arrival_s=i / RATE_PER_S, prompt_tokens=300, output_tokens=60)
        for i in range(REQUESTS)
    ]
    async with (
        ProcessGroup(log_dir=tmp_path / "logs") as group,
        httpx.AsyncClient(timeout=5.0) as admin,
    ):
        stack = await start_stack(
            group=group, plan=plan, mode=Mode.TRIMTAB_PICKER, workdir=tmp_path
        )
        loop = asyncio.get_running_loop()
        start = loop.time()
        load = asyncio.ensure_future(
            replay(
                url=stack.proxy_url,
                model=DEFAULT_MODEL,
                requests=requests,
                deadline_s=DEADLINE_S,
            )
        )
        try:
            await asyncio.sleep(KILL_AT_S)
            before = await _ext_proc_stats(admin, stack.envoy_admin_url)
            killed_at = loop.time() - start
            os.killpg(stack.pids["trimtab"], signal.SIGKILL)
            outcomes = await load
        finally:
            load.cancel()
            await asyncio.gather(load, return_exceptions=True)
        after = await _ext_proc_stats(admin, stack.envoy_admin_url)

    failed = [o for o in outcomes if not o.ok]
    assert failed == [], f"{len(failed)} failed, e.g. {failed[:3]}"
    assert before.get("streams_started", 0) > 0
    assert before.get("failure_mode_allowed", 0) == 0
    assert after.get("failure_mode_allowed", 0) > 0
    _report(outcomes, killed_at=killed_at)


def _report(outcomes: list[Outcome], *, killed_at: float) -> None:
    sent_after = [o for o in outcomes if o.arrival_s >= killed_at and o.ttft_s is not None]
    sent_before = [o for o in outcomes if o.arrival_s < killed_at and o.ttft_s is not None]
    first_token_after = min(o.arrival_s + (o.ttft_s or 0.0) for o in sent_after) - killed_at
    straddling = [o for o in sent_after if o.arrival_s < killed_at + 1.0]

    def worst(chosen: list[Outcome]) -> float:
        return max(o.ttft_s or 0.0 for o in chosen)

    print(
        f"\n[picker killed {time.strftime('%H:%M:%S')}] {len(outcomes)} requests, 0 failed; "
        f"first token of a request sent after the kill: {first_token_after * 1000:.0f} ms after "
        f"it; TTFT max (wall ms): before the kill {worst(sent_before) * 1000:.0f}, sent in the "
        f"first second after it {worst(straddling) * 1000:.0f}, all after it "
        f"{worst(sent_after) * 1000:.0f}"
    )
