"""Publish a pool's reports to the API server: status subresource and core/v1 Events.

Only the leader writes (see :mod:`leadership`). The status is merge-patched by a named task
that always writes the latest report and drops superseded ones, so a slow API server never
holds up the balancing loop; a failed write is retried by the next due report. Events are
handed to kopf's poster (``kopf.event``), which retries them with backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import kopf

from trimtab import tasks
from trimtab.api.records import PoolKey
from trimtab.api.resource import GROUP, PLURAL, VERSION
from trimtab.api.status import InferencePoolStatus
from trimtab.balancing.reporting import Report
from trimtab.errors import KubeApiError, KubeNotFound
from trimtab.kube.client import KubeApi
from trimtab.kube.leadership import Leadership

__all__ = ["KubePoolSink", "status_patch"]

Logger = logging.Logger | logging.LoggerAdapter[logging.Logger]


def status_patch(status: InferencePoolStatus) -> dict[str, Any]:
    """A merge patch that replaces our status fields; a field now unset becomes null (removed)."""
    data = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, info in InferencePoolStatus.model_fields.items():
        data.setdefault(info.alias or name, None)
    return {"status": data}


class KubePoolSink:
    """The :class:`~trimtab.balancing.loop.PoolSink` of one pool in a cluster."""

    def __init__(
        self,
        *,
        pool: PoolKey,
        body: kopf.Body,
        api: KubeApi,
        leadership: Leadership,
        logger: Logger,
    ) -> None:
        self._pool = pool
        self._body = body
        self._api = api
        self._leadership = leadership
        self._logger = logger
        self._path = (
            f"/apis/{GROUP}/{VERSION}/namespaces/{pool.namespace}/{PLURAL}/{pool.name}/status"
        )
        self._pending: tuple[InferencePoolStatus, Callable[[InferencePoolStatus], None]] | None
        self._pending = None
        self._wakeup = asyncio.Event()
        self._task = tasks.start(self._write_forever(), name=f"status writer of {pool}")

    def publish(
        self, *, report: Report, confirm: Callable[[InferencePoolStatus], None]
    ) -> Sequence[str]:
        if not self._leadership.is_leader:
            return ()
        if report.write:
            self._pending = (report.status, confirm)
            self._wakeup.set()
        for event in report.events:
            kopf.event(self._body, type=event.type, reason=event.reason, message=event.message)
        return [event.reason for event in report.events]

    async def close(self, *, deleted: bool) -> None:
        await tasks.stop(self._task)

    async def _write_forever(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self._pending is None:
                continue
            status, confirm = self._pending
            self._pending = None
            try:
                await self._api.merge_patch(self._path, status_patch(status))
            except KubeNotFound:
                self._logger.debug("Pool %s is gone; status not written", self._pool)
            except KubeApiError as exc:
                self._logger.warning("Status of %s not written: %s", self._pool, exc)
            else:
                confirm(status)
