"""Hostile pools files given to ``trimtab run --local``: a clear error, never a traceback.

Each case runs the real process. A 5 MB file, non-UTF-8 bytes and ``interval: .inf`` are
refused at once with exit code 1 and one bounded message naming the file, the byte or the
field. A file with one bad and one good pool serves the good one (its weights reach the status
file) and reports the bad one by field. SIGINT while a ~1 MB file of 490 pools is still loading
stops the process with exit code 0 before any pool starts.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.localstack import wait_for
from trimtab_lab.emulator.fleet import emulate

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRIMTAB = Path(sys.executable).parent / "trimtab"
_HANG_GUARD_S = 60.0
_MESSAGE_LIMIT = 2048


def _pool(name: str, *, port: int, **metrics: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "engine": "vllm",
            "endpoints": [{"name": "e0", "address": "127.0.0.1", "port": port}],
            "metrics": {"interval": "500ms", **metrics},
            "targets": [{"envoy": {"cluster": name}}],
        },
    }


async def _run(pools: Path, status: Path) -> tuple[int, str]:
    """Run trimtab on ``pools`` until it exits (bounded); its exit code and output."""
    process = await asyncio.create_subprocess_exec(
        str(TRIMTAB),
        *("run", "--local", str(pools), "--status-file", str(status)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout=_HANG_GUARD_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace")


def _five_megabytes() -> bytes:
    one = yaml.safe_dump(_pool("big", port=8000)).encode()
    return (b"---\n" + one) * (5 * 1024 * 1024 // (len(one) + 4) + 1)


@pytest.mark.parametrize(
    ("case", "content", "says"),
    [
        ("5 MB", _five_megabytes(), "at most 1 MiB"),
        ("non-UTF-8", b"apiVersion: trimtab.io/v1alpha1\nkind: \xff\xfe\n", "not UTF-8"),
        (
            "interval .inf",
            yaml.safe_dump(_pool("inf", port=8000)).replace("500ms", ".inf").encode(),
            "spec.metrics.interval",
        ),
    ],
)
async def test_a_hostile_file_is_refused_with_one_clear_message(
    tmp_path: Path, case: str, content: bytes, says: str
) -> None:
    pools = tmp_path / "pools.yaml"
    pools.write_bytes(content)
    started = time.monotonic()
    code, output = await _run(pools, tmp_path / "status.json")
    print(f"{case}: {len(content)} bytes, exit {code} after {time.monotonic() - started:.1f}s")
    assert code == 1, output
    assert "Traceback" not in output
    assert says in output and str(pools) in output, output
    assert len(output) < _MESSAGE_LIMIT, output[:_MESSAGE_LIMIT]
    assert not (tmp_path / "status.json").exists()


async def test_the_good_pool_is_served_and_the_bad_one_reported(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    status = tmp_path / "status.json"
    async with emulate(replicas=1) as fleet:
        good = _pool("good", port=fleet.ports[0])
        bad = _pool("bad", port=fleet.ports[0], staleAfter="2h")
        pools.write_text(yaml.safe_dump_all([bad, good]))
        process = await asyncio.create_subprocess_exec(
            str(TRIMTAB),
            *("run", "--local", str(pools), "--status-file", str(status)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            await wait_for(
                lambda: '"weight"' in (status.read_text() if status.exists() else ""),
                what="the good pool's weights in the status file",
            )
            process.send_signal(signal.SIGTERM)
            out, _ = await asyncio.wait_for(process.communicate(), timeout=_HANG_GUARD_S)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    output = out.decode(errors="replace")
    text = status.read_text()
    assert process.returncode == 0, output
    assert "default/good" in text and "default/bad" not in text
    reported = [line for line in output.splitlines() if "Not serving" in line]
    assert len(reported) == 1 and "document 1" in reported[0], output
    assert "spec.metrics.staleAfter" in reported[0] and len(reported[0]) < _MESSAGE_LIMIT
    assert "Traceback" not in output


async def test_sigint_while_a_large_file_loads_stops_before_any_pool(tmp_path: Path) -> None:
    pools = tmp_path / "pools.yaml"
    documents = []
    for index in range(490):
        pool = _pool(f"p{index}", port=8000)
        pool["spec"]["endpoints"] = [
            {"name": f"e{j}", "address": f"10.0.{index % 250}.{j + 1}", "port": 8000}
            for j in range(34)
        ]
        documents.append(pool)
    pools.write_text(yaml.safe_dump_all(documents))
    process = await asyncio.create_subprocess_exec(
        str(TRIMTAB),
        *("run", "--local", str(pools), "--status-file", str(tmp_path / "status.json")),
        "--verbose",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert process.stdout is not None
    try:
        seen = b""
        # The signal handlers are installed when this debug line is logged, before loading.
        while b"Running until SIGINT" not in seen:
            line = await asyncio.wait_for(process.stdout.readline(), timeout=_HANG_GUARD_S)
            assert line, seen.decode(errors="replace")
            seen += line
        process.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        rest = await asyncio.wait_for(process.stdout.read(), timeout=_HANG_GUARD_S)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    output = (seen + rest).decode(errors="replace")
    size = pools.stat().st_size
    print(
        f"SIGINT during the load of {size} bytes: exit {process.returncode} after "
        f"{time.monotonic() - signalled:.1f}s"
    )
    assert process.returncode == 0, output[-_MESSAGE_LIMIT:]
    assert "Traceback" not in output
    assert "Stopped before balancing started" in output
    assert "Balancing 490 pools" not in output
    assert not (tmp_path / "status.json").exists()
