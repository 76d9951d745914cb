"""The shared LLM replica model: profiles, the stepping engine and what it reports.

Used by the fleet simulator (``trimtab.sim``) and by the real-time replica emulator; it imports
nothing else from trimtab, so both can rely on identical engine behaviour.
"""

from trimtab.replica.model import Replica
from trimtab.replica.profiles import PROFILE_NAMES, ReplicaProfile, get_profile
from trimtab.replica.records import EventKind, ReplicaState, RequestEvent, StepReport

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
