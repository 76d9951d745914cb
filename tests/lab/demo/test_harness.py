"""The demo harness end to end, its clean-up, and its failure paths, on real processes.

Covered: a tiny run (3 replicas, a few requests, every mode) writes the simulator's keys;
after a run, a failure and a cancellation no child process is left; a missing binary and a
taken port fail with ComponentFailed naming the component. Not covered: the live view and
the figure's content (drawn, not asserted), Prometheus mode (slow to start).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from trimtab_lab.demo.harness import DemoPlan, run_demo
from trimtab_lab.demo.loadgen import RequestSpec
from trimtab_lab.demo.stack import Mode, StackPlan, start_stack
from trimtab_lab.processes import ComponentFailed, ProcessGroup

SIM_KEYS = {
    "policy", "ttft_p50", "ttft_p90", "ttft_p95", "ttft_p99", "e2e_p50", "e2e_p99",
    "queue_p99", "throughput_tokens_per_s", "imbalance", "preemptions", "completed",
    "rejected", "too_long", "unfinished", "goodput_multiplier",
}  # fmt: skip


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it has exited, which is what matters.
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"


def _plan(tmp_path: Path, *, requests: int = 4, modes: tuple[Mode, ...] = tuple(Mode)) -> DemoPlan:
    return DemoPlan(
        stack=StackPlan(
            speeds=(1.0, 1.0, 0.6),
            profile="llama3-8b-a10g",
            time_scale=20.0,
            metrics_interval_s=0.2,
            policy={"slowStart": "0s"},
        ),
        requests=[
            RequestSpec(arrival_s=0.05 * i, prompt_tokens=100, output_tokens=8)
            for i in range(requests)
        ],
        deadline_s=15.0,
        out=tmp_path,
        modes=modes,
    )


async def test_tiny_run_serves_every_mode_and_leaves_no_process(tmp_path: Path) -> None:
    runs = await run_demo(plan=_plan(tmp_path))
    assert [run.mode for run in runs] == list(Mode)
    for run in runs:
        assert set(run.result) >= SIM_KEYS
        assert run.result["completed"] == 4
        assert run.result["errors"] == 0
    for run in runs:
        assert run.samples
    pids = [int(p) for p in _logged_pids(tmp_path)]
    assert pids and all(_gone(pid) for pid in pids)


def _logged_pids(tmp_path: Path) -> list[str]:
    return [p.read_text() for p in tmp_path.glob("pids/*")]


@pytest.fixture(autouse=True)
def _record_pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Write every started child's pid to tmp_path/pids, so tests can check it is gone."""
    original = ProcessGroup.start
    folder = tmp_path / "pids"
    folder.mkdir()

    async def start(self: ProcessGroup, **kwargs: object) -> object:
        running = await original(self, **kwargs)  # type: ignore[arg-type]
        (folder / f"{running.name}-{running.process.pid}").write_text(str(running.process.pid))
        return running

    monkeypatch.setattr(ProcessGroup, "start", start)


async def test_missing_binary_names_the_component(tmp_path: Path) -> None:
    async with ProcessGroup(log_dir=tmp_path / "logs") as group:
        with pytest.raises(ComponentFailed, match="envoy-missing"):
            await group.start(name="envoy-missing", argv=[str(tmp_path / "no-such-envoy")])


async def test_component_exiting_early_is_named_with_its_log(tmp_path: Path) -> None:
    async with ProcessGroup(log_dir=tmp_path / "logs") as group:
        running = await group.start(
            name="broken", argv=["sh", "-c", "echo cannot bind port >&2; exit 3"]
        )
        with pytest.raises(ComponentFailed, match=r"(?s)broken exited with code 3.*cannot bind"):
            await group.wait_http(running, url="http://127.0.0.1:9/", timeout_s=10)


async def test_port_taken_fails_clearly_and_stops_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # Every port the stack asks for is the taken one: the emulators cannot listen.
        monkeypatch.setattr(
            "trimtab_lab.demo.stack.free_ports",
            lambda count, contiguous=False: [port + i for i in range(count)],
        )
        with pytest.raises(ComponentFailed, match="emulators"):
            async with ProcessGroup(log_dir=tmp_path / "logs") as group:
                await start_stack(
                    group=group, plan=_plan(tmp_path).stack, mode=Mode.ROUND_ROBIN,
                    workdir=tmp_path / "w", ready_s=10,
                )  # fmt: skip
    pids = [int(p) for p in _logged_pids(tmp_path)]
    assert pids and all(_gone(pid) for pid in pids)


async def test_cancelling_mid_run_stops_every_process(tmp_path: Path) -> None:
    plan = _plan(tmp_path, requests=20, modes=(Mode.TRIMTAB,))
    task = asyncio.create_task(run_demo(plan=plan), name="demo under test")
    # Polls files the fixture writes from inside the task: there is no event to wait on.
    while len(_logged_pids(tmp_path)) < 3:  # noqa: ASYNC110 (emulators, trimtab, envoy)
        await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pids = [int(p) for p in _logged_pids(tmp_path)]
    assert all(_gone(pid) for pid in pids)
