"""The shared LLM replica model: profiles, the stepping engine and what it reports.

Used by the fleet simulator (``trimtab_lab.sim``) and by the real-time replica emulator; it imports
nothing else from trimtab, so both can rely on identical engine behaviour.
"""

from trimtab_lab.replica.model import Replica
from trimtab_lab.replica.profiles import PROFILE_NAMES, ReplicaProfile, get_profile
from trimtab_lab.replica.records import EventKind, ReplicaState, RequestEvent, StepReport

__all__ = [
    "PROFILE_NAMES",
    "EventKind",
    "Replica",
    "ReplicaProfile",
    "ReplicaState",
    "RequestEvent",
    "StepReport",
    "get_profile",
]
