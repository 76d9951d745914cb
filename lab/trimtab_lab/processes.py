"""Child processes of the lab (emulators, Envoy, trimtab, Prometheus): start, wait, always stop.

A :class:`ProcessGroup` owns every process it started. Leaving its ``async with`` block, for
whatever reason (the end of a run, an error, Ctrl-C), terminates them all — SIGTERM, then
SIGKILL after a grace period — so no process is left behind. A component that
does not become ready raises :class:`ComponentFailed` naming it and quoting its log's tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

from trimtab.errors import TrimtabError

__all__ = ["ComponentFailed", "ProcessGroup", "RunningProcess"]

_LOG_TAIL_CHARS = 2000


class ComponentFailed(TrimtabError):
    """A component could not start; the message says which and why."""


@dataclass(frozen=True)
class RunningProcess:
    name: str
    process: asyncio.subprocess.Process
    log_path: Path

    def log_tail(self) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return text[-_LOG_TAIL_CHARS:]

    def check_alive(self) -> None:
        """Raise :class:`ComponentFailed`, quoting the log, if the process has exited."""
        if self.process.returncode is not None:
            raise ComponentFailed(
                f"{self.name} exited with code {self.process.returncode} "
                f"before it was ready; its log ends with:\n{self.log_tail()}"
            )


class ProcessGroup:
    """Starts named processes with their output in log files and stops all of them on exit."""

    def __init__(self, *, log_dir: Path, grace_s: float = 5.0) -> None:
        self._log_dir = log_dir
        self._grace_s = grace_s
        self._running: list[RunningProcess] = []

    async def __aenter__(self) -> ProcessGroup:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Shielded so that a second Ctrl-C during clean-up cannot orphan a child.
        await asyncio.shield(self.stop_all())

    @property
    def running(self) -> list[RunningProcess]:
        return list(self._running)

    async def start(
        self, *, name: str, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> RunningProcess:
        """Start ``argv`` in its own process group, output to ``<log_dir>/<name>.log``."""
        log_path = self._log_dir / f"{name}.log"
        log_file = log_path.open("wb")
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,
            )
        except OSError as exc:
            raise ComponentFailed(f"{name}: cannot start {argv[0]!r}: {exc}") from exc
        finally:
            log_file.close()
        running = RunningProcess(name=name, process=process, log_path=log_path)
        self._running.append(running)
        return running

    async def wait_http(
        self, running: RunningProcess, *, url: str, timeout_s: float, expect: int = 200
    ) -> None:
        """Wait until ``url`` answers ``expect``; fail early if the process dies."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        last_error = "no answer"
        async with httpx.AsyncClient(timeout=1.0) as client:
            while loop.time() < deadline:
                running.check_alive()
                try:
                    response = await client.get(url)
                    if response.status_code == expect:
                        return
                    last_error = f"HTTP {response.status_code}"
                except httpx.HTTPError as exc:
                    last_error = type(exc).__name__
                await asyncio.sleep(0.1)
        raise ComponentFailed(
            f"{running.name} was not ready at {url} within {timeout_s:.0f}s ({last_error}); "
            f"its log ends with:\n{running.log_tail()}"
        )

    async def stop(self, running: RunningProcess) -> None:
        """Terminate one process and its children (SIGTERM, then SIGKILL after the grace)."""
        process = running.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout=self._grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                await process.wait()
        if running in self._running:
            self._running.remove(running)

    async def stop_all(self) -> None:
        for running in reversed(self._running):
            await self.stop(running)
