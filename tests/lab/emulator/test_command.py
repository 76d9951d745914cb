"""``trimtab emulate`` as a process: prints its URLs, serves, stops cleanly on SIGTERM.

Also the parameter checks that click reports without starting anything.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

import httpx
from click.testing import CliRunner

from trimtab_lab.emulator.command import emulate_command

_LAUNCH = "from trimtab_lab.emulator.command import emulate_command; emulate_command()"


def _free_port_pair() -> int:
    """A base port whose successor is also free (checked, then released)."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            base: int = first.getsockname()[1]
            if base >= 65535:
                continue
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", base + 1))
                except OSError:
                    continue
        return base
    raise RuntimeError("no two consecutive free ports")


async def test_command_serves_until_sigterm() -> None:
    base = _free_port_pair()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _LAUNCH,
        "--replicas=2",
        f"--base-port={base}",
        "--engine=sglang",
        "--speeds=1,0.5",
        "--time-scale=10",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        lines = [
            (await asyncio.wait_for(process.stdout.readline(), timeout=20)).decode()
            for _ in range(2)
        ]
        assert [line.split()[0] for line in lines] == [
            f"http://127.0.0.1:{base}",
            f"http://127.0.0.1:{base + 1}",
        ]
        async with httpx.AsyncClient(timeout=5) as client:
            metrics = await client.get(f"http://127.0.0.1:{base + 1}/metrics")
        assert "sglang:num_running_reqs" in metrics.text
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), timeout=10) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


def test_speeds_must_match_replicas() -> None:
    result = CliRunner().invoke(emulate_command, ["--replicas=3", "--speeds=1,0.5"])
    assert result.exit_code == 2
    assert "2 speeds for 3 replicas" in result.output


def test_unknown_engine_is_refused() -> None:
    result = CliRunner().invoke(emulate_command, ["--engine=custom"])
    assert result.exit_code == 2
