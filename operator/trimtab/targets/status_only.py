"""A target that publishes nothing: the decision only reaches the InferencePool status.

For dry runs ("what would trimtab do?") and for pools whose data plane is configured by hand
from ``kubectl describe``. It is always ``Synced`` because there is nothing to wait for.
"""

from __future__ import annotations

from collections.abc import Mapping

from trimtab.api.records import Decision, Endpoint, PodName, PoolKey
from trimtab.api.spec import InferencePoolSpec
from trimtab.targets.base import TargetState

__all__ = ["StatusOnlyTarget"]

_SYNCED = TargetState(True, "Synced", "status only: no data plane is configured")


class StatusOnlyTarget:
    @property
    def name(self) -> str:
        return "status"

    async def apply(
        self,
        *,
        pool: PoolKey,
        spec: InferencePoolSpec,
        decision: Decision,
        endpoints: Mapping[PodName, Endpoint],
    ) -> TargetState:
        return _SYNCED

    def state(self, *, pool: PoolKey) -> TargetState:
        return _SYNCED

    async def remove(self, *, pool: PoolKey) -> None:
        return None
