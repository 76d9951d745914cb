"""A restarted ``trimtab run --local`` continues from the weights in its status file.

With every replica's metrics down the policy can only decay what it knew towards equal
weights; it must start that decay from the restored weights, not from equal ones.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import yaml

from support.emulators import free_port
from trimtab.balancing.loop import LoopSettings
from trimtab.local.runner import run_local

from .conftest import poll


def _pools(path: Path) -> Path:
    pool = {
        "apiVersion": "trimtab.io/v1alpha1",
        "kind": "InferencePool",
        "metadata": {"name": "llama", "namespace": "default"},
        "spec": {
            "endpoints": [
                {"name": name, "address": "127.0.0.1", "port": free_port(hosts=["127.0.0.1"])}
                for name in ("a", "b")
            ],
            "metrics": {"source": "direct", "interval": "200ms", "staleAfter": "1s"},
            "policy": {"slowStart": "0s", "staleDecay": "1m"},
            "targets": [{"envoy": {"cluster": "llama"}}],
        },
    }
    path.write_text(yaml.safe_dump(pool))
    return path


def _status(weights: dict[str, int]) -> dict[str, object]:
    pods = [
        {"name": n, "weight": w, "maxInFlight": 64, "state": "Serving", "reason": "kv 0.9"}
        for n, w in weights.items()
    ]
    return {"default/llama": {"pods": pods}}


async def test_weights_continue_from_the_status_file(tmp_path: Path) -> None:
    status_file = tmp_path / "status.json"
    status_file.write_text(json.dumps(_status({"a": 200, "b": 1000})))
    stop = asyncio.Event()
    run = asyncio.create_task(
        run_local(
            pools_file=_pools(tmp_path / "pools.yaml"),
            status_file=status_file,
            xds_port=None,
            metrics_port=None,
            stop=stop,
            settings=LoopSettings(read_timeout_floor_s=0.5),
        )
    )

    async def written() -> dict[str, int]:
        pods = json.loads(status_file.read_text())["default/llama"].get("pods", [])
        weights = {p["name"]: p["weight"] for p in pods}
        return (
            weights
            if "lastDecisionTime" in json.loads(status_file.read_text())["default/llama"]
            else {}
        )

    try:
        weights = await poll(written, timeout_s=10, what="a decision written")
    finally:
        stop.set()
        await asyncio.wait_for(run, timeout=10)
    # Decaying from 200 towards 1000 with a one-minute time constant: still far from equal.
    assert weights["a"] < 400 < weights["b"]


async def test_a_corrupt_status_file_starts_fresh(tmp_path: Path) -> None:
    status_file = tmp_path / "status.json"
    status_file.write_bytes(b"\xff{not json")
    stop = asyncio.Event()
    run = asyncio.create_task(
        run_local(
            pools_file=_pools(tmp_path / "pools.yaml"),
            status_file=status_file,
            xds_port=None,
            metrics_port=None,
            stop=stop,
            settings=LoopSettings(read_timeout_floor_s=0.5),
        )
    )

    async def written() -> bool:
        try:
            return "default/llama" in json.loads(status_file.read_text())
        except ValueError:
            return False

    try:
        await poll(written, timeout_s=10, what="a fresh status file")
    finally:
        stop.set()
        await asyncio.wait_for(run, timeout=10)
