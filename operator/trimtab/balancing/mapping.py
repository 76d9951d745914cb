"""``spec.policy`` and ``spec.metrics`` → :class:`~trimtab.policy.PolicySettings`.

Every policy knob has a camelCase twin in ``spec.policy`` with the same default and range (a
test keeps them equal), so this is a plain field-by-field copy plus the unit conversion of
durations. Should the policy still refuse a value the CRD let through, the error becomes
:class:`~trimtab.errors.SpecInvalid` naming the spec field, not a crash.
"""

from __future__ import annotations

from pydantic.alias_generators import to_camel

from trimtab.api.spec import InferencePoolSpec
from trimtab.errors import SpecInvalid
from trimtab.policy import PolicySettings

__all__ = ["settings_from_spec"]


def settings_from_spec(spec: InferencePoolSpec) -> PolicySettings:
    """The policy settings of a pool; raise :class:`SpecInvalid` if the policy refuses them."""
    policy = spec.policy
    try:
        return PolicySettings(
            max_in_flight_per_pod=policy.max_in_flight_per_pod,
            min_in_flight_per_pod=policy.min_in_flight_per_pod,
            adaptive_caps=policy.adaptive_caps,
            cap_headroom=policy.cap_headroom,
            slow_start_s=float(policy.slow_start),
            slow_start_min_fraction=policy.slow_start_min_fraction,
            stale_after_s=float(spec.metrics.stale_after),
            stale_decay_s=float(policy.stale_decay),
            kv_low_watermark=policy.kv_low_watermark,
            kv_high_watermark=policy.kv_high_watermark,
            queue_weight=policy.queue_weight,
            speed_weight=policy.speed_weight,
            smoothing_s=float(policy.smoothing),
            min_weight_change=policy.min_weight_change,
            weight_scale=policy.weight_scale,
            weight_floor=policy.weight_floor,
            drain_preemption_rate=policy.drain_preemption_rate,
            drain_cap_fraction=policy.drain_cap_fraction,
            active_request_bias=policy.active_request_bias,
            choice_count=policy.choice_count,
            max_pending_requests=policy.max_pending_requests,
        )
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        field = (
            "spec.metrics.staleAfter"
            if name == "stale_after_s"
            else f"spec.policy.{to_camel(name.removesuffix('_s'))}"
        )
        raise SpecInvalid([f"{field}: {exc}"]) from exc
