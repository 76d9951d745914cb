"""Run one pool's loop until told to stop, then close it: the same in a cluster and locally.

The close runs as its own task under a shield: kopf may cancel a daemon a second time while it
cleans up, and a close cut short would leak the pool's status writer and target drivers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from trimtab import tasks
from trimtab.balancing.loop import PoolLoop

__all__ = ["Stopping", "supervise"]


class Stopping(Protocol):
    """Something that can be waited for: kopf's daemon flag, or an :class:`asyncio.Event`."""

    def wait(self) -> Awaitable[Any]: ...


async def supervise(
    *,
    loop: PoolLoop,
    stopping: Stopping,
    deleted: Callable[[], bool] = lambda: False,
    close_timeout_s: float = 10.0,
) -> None:
    """Tick ``loop`` until ``stopping`` fires (or this task is cancelled), then close it."""
    ticking = tasks.start(loop.run(), name=f"balancing loop of {loop.pool}")
    try:
        await stopping.wait()
    finally:
        await tasks.stop(ticking)
        closing = tasks.start(loop.close(deleted=deleted()), name=f"closing {loop.pool}")
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            await asyncio.wait([closing], timeout=close_timeout_s)
            closing.cancel()
            raise
