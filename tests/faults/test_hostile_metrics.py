"""Hostile metrics pages cost only their own pod its sample, and bounded memory (issue 12, point 5).

One pool of seven static endpoints read directly every second by ``trimtab run --local`` (a
real process, so its peak RSS is its own): three healthy vLLM pages and four hostile ones
(:mod:`hostile_pages`, a child process): a 50 MB page, a page sent at 1 byte/s, 2 MiB of
random bytes, and one wanted line whose labels repeat 200,000 times. Over 15 s of status
writes, asserted: the healthy pods are Serving on fresh samples in every write, every pod keeps
a weight above zero, the huge, slow and garbage pods are never Serving (the first two with a
reason naming the cap or the deadline), the pool is never ``SourceUnavailable``, and trimtab's
peak RSS stays under a bound far below what one 50 MB page used to cost (897 MB in the
issue's probe).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.emulators import free_port
from trimtab_lab.processes import ProcessGroup

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TRIMTAB = Path(sys.executable).parent / "trimtab"
PAGES = Path(__file__).with_name("hostile_pages.py")
HEALTHY = {"ok-0": "127.0.0.2", "ok-1": "127.0.0.3", "ok-2": "127.0.0.4"}
HOSTILE = ("huge", "slow", "garbage", "labels")
HOSTILE_IP = "127.0.0.5"
# Status writes are rate-limited: watch for 15 s after the first.
OBSERVE_POLLS = 150
PEAK_RSS_BOUND_MIB = 400
_START_S = 20.0


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM in /proc status")


def _pools(path: Path, *, ports: dict[str, int]) -> Path:
    endpoints = [
        {"name": name, "address": ip, "port": ports[name]} for name, ip in HEALTHY.items()
    ] + [{"name": kind, "address": HOSTILE_IP, "port": ports[kind]} for kind in HOSTILE]
    pool = {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": "default"},
        "spec": {
            "engine": "vllm",
            "endpoints": endpoints,
            "metrics": {"source": "direct", "interval": "1s", "staleAfter": "3s"},
            "policy": {"slowStart": "0s"},
            "targets": [{"envoy": {"cluster": "llama"}}],
        },
    }
    path.write_text(yaml.safe_dump(pool))
    return path


async def test_hostile_pages_leave_the_healthy_pods_fresh(tmp_path: Path) -> None:
    ports = {name: free_port(hosts=[ip]) for name, ip in HEALTHY.items()}
    ports.update({kind: free_port(hosts=[HOSTILE_IP]) for kind in HOSTILE})
    specs = [f"{ip}:{ports[name]}:healthy" for name, ip in HEALTHY.items()]
    specs += [f"{HOSTILE_IP}:{ports[kind]}:{kind}" for kind in HOSTILE]
    status_file = tmp_path / "status.json"
    pools_file = _pools(tmp_path / "pools.yaml", ports=ports)
    seen: list[dict[str, Any]] = []
    async with ProcessGroup(log_dir=tmp_path / "logs") as group:
        pages = await group.start(name="pages", argv=[sys.executable, str(PAGES), *specs])
        for name, ip in HEALTHY.items():
            await group.wait_http(
                pages, url=f"http://{ip}:{ports[name]}/metrics", timeout_s=_START_S
            )
        trimtab = await group.start(
            name="trimtab",
            argv=[
                str(TRIMTAB),
                "run",
                "--local",
                str(pools_file),
                "--status-file",
                str(status_file),
            ],
        )
        last_write = ""
        polls_left = OBSERVE_POLLS
        for _ in range(int(_START_S * 10) + OBSERVE_POLLS):
            if polls_left == 0:
                break
            await asyncio.sleep(0.1)
            assert trimtab.process.returncode is None, trimtab.log_tail()
            if seen:
                polls_left -= 1
            try:
                text = status_file.read_text()
                pool = json.loads(text)["default/llama"]
            except (OSError, ValueError, KeyError):
                continue
            if text != last_write and pool.get("pods"):
                last_write = text
                seen.append(pool)
        peak_mib = _peak_rss_mib(trimtab.process.pid)
    print(f"trimtab peak RSS {peak_mib:.0f} MiB over {len(seen)} status writes")
    print(json.dumps(seen[-1]["pods"], indent=1))
    assert len(seen) >= 2, "too few status writes"
    for pool in seen[1:]:  # the first write may predate the first read of every pod
        pods = {row["name"]: row for row in pool["pods"]}
        assert all(row["weight"] > 0 for row in pods.values()), pods
        for name in HEALTHY:
            assert pods[name]["state"] == "Serving", pods[name]
        # The labels page also holds valid lines: it may serve when its parse finishes in time.
        for kind in ("huge", "slow", "garbage"):
            assert pods[kind]["state"] != "Serving", pods[kind]
        reasons = json.dumps(pool.get("conditions", []))
        assert "SourceUnavailable" not in reasons, reasons
    last = {row["name"]: row for row in seen[-1]["pods"]}
    assert "larger than 4 MiB" in last["huge"]["reason"], last["huge"]
    assert "not read and parsed within" in last["slow"]["reason"], last["slow"]
    assert all(len(row["reason"]) <= 256 for row in last.values())
    assert peak_mib < PEAK_RSS_BOUND_MIB
