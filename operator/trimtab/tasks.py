"""Owned asyncio tasks: started with a name, stopped without swallowing the caller's cancel.

``suppress(CancelledError): await task`` after ``task.cancel()`` also swallows a cancellation
aimed at the *caller* while it waits, so a stopping operator could hang in a half-closed
state. :func:`stop` cancels, waits under a shield (a second cancellation cannot cut the
child's clean-up short) and re-raises the caller's own cancellation once the wait is done.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["start", "stop"]

T = TypeVar("T")
logger = logging.getLogger(__name__)


def start(coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
    """A named task whose failure is logged the moment it happens, not when awaited."""
    task = asyncio.create_task(coro, name=name)
    task.add_done_callback(_log_failure)
    return task


async def stop(*tasks: asyncio.Task[Any] | None, timeout_s: float | None = None) -> None:
    """Cancel ``tasks`` and wait for them; re-raises only a cancellation of the caller.

    A task that ignores cancellation is abandoned after ``timeout_s`` with a warning.
    """
    owned = [task for task in tasks if task is not None]
    if not owned:
        return
    for task in owned:
        task.cancel()
    waiting = asyncio.ensure_future(asyncio.wait(owned, timeout=timeout_s))
    try:
        _, pending = await asyncio.shield(waiting)
    except asyncio.CancelledError:
        await asyncio.wait([waiting], timeout=timeout_s)
        raise
    for task in pending:
        logger.warning("Task %r did not stop within %ss", task.get_name(), timeout_s)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        logger.error("Task %r failed", task.get_name(), exc_info=exc)
