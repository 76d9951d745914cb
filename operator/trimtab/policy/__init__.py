"""The balancing policy: per-pod load in, Envoy weights and in-flight caps out.

A pure function of its inputs (no I/O, clock, globals or randomness) that imports only
``trimtab.api.records`` and the standard library, so the operator and the fleet simulator run
the very same code. ``docs/policy.md`` explains the algorithm and how its defaults were chosen.
"""

from trimtab.policy.deciding import compute_decision
from trimtab.policy.settings import PolicySettings

__all__ = ["PolicySettings", "compute_decision"]
