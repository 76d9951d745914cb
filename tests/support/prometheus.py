"""A real Prometheus (the Debian binary) for tests, scraping given targets every second.

:func:`run_prometheus` writes a config with one static target per scraped address and the
target labels to attach (``namespace``/``pod``, as a Kubernetes service discovery would),
keeps the TSDB in the test's tmp folder, listens on 127.0.0.1 only and waits for ``/-/ready``.
The process is always terminated on exit (killed if it does not stop), also when the test
fails; :meth:`Prometheus.stop` stops it earlier, for tests of an outage. Without the binary
:func:`require_prometheus` skips locally and fails in CI (``CI=true``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import yaml

from support.emulators import free_port

__all__ = ["PROMETHEUS", "Prometheus", "ScrapeTarget", "require_prometheus", "run_prometheus"]

PROMETHEUS = "/usr/bin/prometheus"
_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0


@dataclass(frozen=True, kw_only=True)
class ScrapeTarget:
    """One ``host:port`` to scrape at ``/metrics`` and the target labels Prometheus adds."""

    address: str
    port: int
    labels: Mapping[str, str] = field(default_factory=dict)


def require_prometheus() -> str:
    """The binary's path; skip the test without it, or fail it in CI."""
    found = shutil.which(PROMETHEUS) or shutil.which("prometheus")
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{PROMETHEUS} is missing; CI must install the prometheus package")
        pytest.skip(f"{PROMETHEUS} not installed (apt-get install -y prometheus)")
    return found


class Prometheus:
    """A running Prometheus process; :meth:`stop` ends it (idempotent)."""

    def __init__(self, *, process: asyncio.subprocess.Process, url: str) -> None:
        self.process = process
        self.url = url

    async def stop(self) -> None:
        if self.process.returncode is not None:
            return
        self.process.terminate()
        try:
            await asyncio.wait_for(self.process.wait(), timeout=_STOP_TIMEOUT_S)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


@contextlib.asynccontextmanager
async def run_prometheus(
    *, targets: Sequence[ScrapeTarget], workdir: Path, binary: str
) -> AsyncIterator[Prometheus]:
    """Serve Prometheus on a free 127.0.0.1 port until exit; scrape interval 1s."""
    config_path = _write_config(targets=targets, workdir=workdir)
    port = free_port(hosts=["127.0.0.1"])
    with (workdir / "prometheus.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config_path}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            stdout=log,
            stderr=log,
        )
    server = Prometheus(process=process, url=f"http://127.0.0.1:{port}")
    try:
        await _wait_ready(server)
        yield server
    finally:
        await server.stop()


def _write_config(*, targets: Sequence[ScrapeTarget], workdir: Path) -> Path:
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "engines",
                "static_configs": [
                    {"targets": [f"{t.address}:{t.port}"], "labels": dict(t.labels)}
                    for t in targets
                ],
            }
        ],
    }
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    return path


async def _wait_ready(server: Prometheus) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _READY_TIMEOUT_S
    async with httpx.AsyncClient(timeout=1.0) as client:
        while loop.time() < deadline:
            if server.process.returncode is not None:
                raise RuntimeError(f"prometheus exited with {server.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if (await client.get(f"{server.url}/-/ready")).status_code == httpx.codes.OK:
                    return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"prometheus at {server.url} not ready after {_READY_TIMEOUT_S}s")
