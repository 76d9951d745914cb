"""``metav1.Condition`` bookkeeping, ported from apimachinery's ``SetStatusCondition``.

A condition's ``lastTransitionTime`` moves only when its ``status`` flips; reason, message
and observedGeneration are updated in place. The caller learns whether anything changed, so
an unchanged condition set costs no status write and no event.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence

from trimtab.api.status import Condition, ConditionStatus, ConditionType
from trimtab.api.times import rfc3339

__all__ = ["find_condition", "set_condition"]


def find_condition(conditions: Sequence[Condition], kind: ConditionType | str) -> Condition | None:
    return next((c for c in conditions if c.type == str(kind)), None)


def set_condition(
    *,
    conditions: Sequence[Condition],
    kind: ConditionType,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    observed_generation: int | None = None,
    now: datetime.datetime,
) -> tuple[list[Condition], bool]:
    """Return the new condition list and whether it differs from ``conditions``."""
    existing = find_condition(conditions, kind)
    if existing is None:
        added = Condition(
            type=str(kind),
            status=status,
            reason=reason,
            message=message,
            observed_generation=observed_generation,
            last_transition_time=rfc3339(now),
        )
        return [*conditions, added], True
    flipped = existing.status != status
    updated = existing.model_copy(
        update={
            "status": status,
            "reason": reason,
            "message": message,
            "observed_generation": observed_generation,
            "last_transition_time": rfc3339(now) if flipped else existing.last_transition_time,
        }
    )
    changed = updated != existing
    return [updated if c is existing else c for c in conditions], changed
