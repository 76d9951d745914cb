"""Local mode's sink: decisions and events to the log, status to a JSON file.

The file maps ``namespace/name`` to each pool's status exactly as it would appear in the
cluster. It is replaced by an atomic rename, by a named task that always writes the newest
state, so readers never see a half-written file and the loop never waits for the disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pydantic

from trimtab import tasks
from trimtab.api.reasons import EventType
from trimtab.api.records import PoolKey
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.reporting import Report
from trimtab.files import write_atomically

__all__ = ["LocalSink", "StatusFile", "read_statuses"]

logger = logging.getLogger(__name__)


def read_statuses(path: Path | None) -> dict[str, InferencePoolStatus]:
    """The statuses a previous run left in ``path``: where a restart finds its weights.

    A missing, unreadable or foreign file means starting from equal weights, with a warning;
    a pool whose entry no longer parses starts fresh alone.
    """
    if path is None or not path.exists():
        return {}
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        logger.warning("Status file %s not restored (%s); starting fresh", path, type(exc).__name__)
        return {}
    if not isinstance(raw, dict):
        logger.warning("Status file %s not restored: not a JSON object", path)
        return {}
    restored = {}
    for key, value in raw.items():
        try:
            restored[str(key)] = InferencePoolStatus.model_validate(value)
        except pydantic.ValidationError:
            logger.warning("Status of %s in %s not restored: it does not parse", key, path)
    return restored


class StatusFile:
    """All pools' latest status, flushed to ``path`` (if any) whenever one changes."""

    def __init__(
        self, *, path: Path | None, restored: dict[str, InferencePoolStatus] | None = None
    ) -> None:
        self._path = path
        self._statuses: dict[str, dict[str, Any]] = {
            key: status.model_dump(mode="json", by_alias=True, exclude_none=True)
            for key, status in (restored or {}).items()
        }
        self._wakeup = asyncio.Event()
        self._task = tasks.start(self._flush_forever(), name="status file writer")

    def put(self, *, pool: PoolKey, status: InferencePoolStatus) -> None:
        self._statuses[str(pool)] = status.model_dump(mode="json", by_alias=True, exclude_none=True)
        self._wakeup.set()

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self._statuses)

    async def aclose(self) -> None:
        await tasks.stop(self._task)
        if self._path is not None:  # the final state, so the file matches the last log line
            await asyncio.to_thread(_write, self._path, self.snapshot())

    async def _flush_forever(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._path is None:
                continue
            try:
                await asyncio.to_thread(_write, self._path, self.snapshot())
            except OSError as exc:
                logger.warning("Cannot write the status file %s: %s", self._path, exc)


class LocalSink:
    """The :class:`~trimtab.balancing.loop.PoolSink` of one pool in local mode."""

    def __init__(self, *, pool: PoolKey, file: StatusFile) -> None:
        self._pool = pool
        self._file = file

    def publish(
        self, *, report: Report, confirm: Callable[[InferencePoolStatus], None]
    ) -> Sequence[str]:
        for event in report.events:
            level = logging.WARNING if event.type is EventType.WARNING else logging.INFO
            logger.log(level, "[%s] %s: %s", self._pool, event.reason, event.message)
        if report.write:
            self._file.put(pool=self._pool, status=report.status)
            pods = ", ".join(
                f"{p.name} w={p.weight} cap={p.max_in_flight} {p.state}" for p in report.status.pods
            )
            logger.info("[%s] %s", self._pool, pods or "no pods")
            confirm(report.status)
        return [event.reason for event in report.events]

    async def close(self, *, deleted: bool) -> None:
        return None


def _write(path: Path, data: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=2, sort_keys=True))
