"""Local mode needs no Kubernetes library: ``trimtab run --local`` with kopf unimportable.

The child process puts a finder first on ``sys.meta_path`` that raises on ``import kopf`` and
``import kubernetes``; the run must still balance the pool from the file and stop on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

from support.emulators import Pod, free_port

from .conftest import NAMESPACE, POOL, poll

_BLOCKER = """
import sys
class _NoKubernetes:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"kopf", "kubernetes"}:
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, _NoKubernetes())
try:
    import kopf
except ImportError:
    pass
else:
    raise SystemExit("the blocker does not block")
from trimtab.commands.main import main
sys.argv[0] = "trimtab"
main()
"""


async def test_run_local_balances_with_kopf_unimportable(
    tmp_path: Path, replicas: list[Pod], pools_file: Path
) -> None:
    status_file = tmp_path / "status.json"
    log = tmp_path / "trimtab.log"
    with log.open("wb") as stream:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-c", _BLOCKER, "run", "--local", str(pools_file)),
            *("--status-file", str(status_file)),
            *("--xds-port", str(free_port(hosts=["127.0.0.1"]))),
            stdout=stream,
            stderr=stream,
        )
        try:

            async def decided() -> int:
                if process.returncode is not None:
                    raise AssertionError(f"exited {process.returncode}: {log.read_text()}")
                if not status_file.exists():
                    return 0
                pool = json.loads(status_file.read_text()).get(f"{NAMESPACE}/{POOL}", {})
                return len([p for p in pool.get("pods", []) if p["weight"] > 0])

            assert await poll(decided, timeout_s=20, what="a decision") == len(replicas)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), timeout=10) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert "Traceback" not in log.read_text()
