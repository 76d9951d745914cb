"""``spec.policy`` and ``spec.metrics`` → :class:`~trimtab.policy.PolicySettings`.

The API carries the knobs users set; the policy has more (smoothing, floors) whose defaults
the simulator chose. Values the CRD accepts but the policy refuses (a two-hour slow start)
become :class:`~trimtab.errors.SpecInvalid` naming the spec field, not a crash.
"""

from __future__ import annotations

from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import SpecInvalid
from trimtab.policy import PolicySettings

__all__ = ["settings_from_spec"]

# PolicySettings field → the spec field a user would have to change.
_FIELDS = {
    "max_in_flight_per_pod": "spec.policy.maxInFlightPerPod",
    "min_in_flight_per_pod": "spec.policy.maxInFlightPerPod",
    "slow_start_s": "spec.policy.slowStart",
    "stale_after_s": "spec.metrics.staleAfter",
    "kv_high_watermark": "spec.policy.kvHighWatermark",
    "active_request_bias": "spec.policy.activeRequestBias",
    "choice_count": "spec.policy.choiceCount",
    "max_pending_requests": "spec.policy.maxPendingRequests",
}


def settings_from_spec(spec: InferencePoolSpec) -> PolicySettings:
    """The policy settings of a pool; raise :class:`SpecInvalid` if the policy refuses them."""
    policy = spec.policy
    defaults = PolicySettings()
    try:
        return PolicySettings(
            max_in_flight_per_pod=policy.max_in_flight_per_pod,
            # The adaptive floor may not exceed the ceiling a user chose below it.
            min_in_flight_per_pod=min(defaults.min_in_flight_per_pod, policy.max_in_flight_per_pod),
            slow_start_s=float(policy.slow_start),
            stale_after_s=float(spec.metrics.stale_after),
            kv_high_watermark=policy.kv_high_watermark,
            active_request_bias=policy.active_request_bias,
            choice_count=policy.choice_count,
            max_pending_requests=policy.max_pending_requests,
        )
    except ValueError as exc:
        text = str(exc)
        field = next((path for name, path in _FIELDS.items() if text.startswith(name)), "spec")
        raise SpecInvalid([f"{field}: {text}"]) from exc
