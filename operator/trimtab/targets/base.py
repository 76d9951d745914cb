"""The interface every decision target implements (xDS, file EDS, Gateway API, status-only).

A target receives a pool's whole decision (level-triggered: the latest state, not a delta)
and reports whether the data plane has it. ``apply`` must be idempotent and must not block
the event loop; asynchronous outcomes (an Envoy NACK after a push) surface through ``state``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec

__all__ = ["Target", "TargetState"]


@dataclass(frozen=True)
class TargetState:
    """Whether a target holds the latest decision of a pool."""

    synced: bool
    reason: str
    """CamelCase reason for the TargetsSynced condition, e.g. ``Synced`` or ``EnvoyNack``."""
    message: str = ""


class Target(Protocol):
    @property
    def name(self) -> str:
        """Stable, human-readable name, e.g. ``envoy:llama-8b``."""
        ...

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        """Publish ``decision``; raise :class:`trimtab.errors.TargetSyncError` on failure."""
        ...

    def state(self, *, pool: PoolKey) -> TargetState:
        """The latest known outcome for ``pool`` (may change after ``apply`` returns)."""
        ...

    async def remove(self, *, pool: PoolKey) -> None:
        """Forget ``pool`` (it was deleted or no longer names this target)."""
        ...
