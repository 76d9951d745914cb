"""The admission logic: exact per-pod in-flight caps and one shared queue. Pure: no I/O.

The picker (ext_proc) and the simulator's ``trimtab_picker`` balancer drive the same
:class:`Admission` object; time comes in as ``now``. :mod:`trimtab.admission.core` explains the
rules, :mod:`trimtab.admission.pods` the KV-token estimate.
"""

from trimtab.admission.core import Admission
from trimtab.admission.feeding import pod_capacities, settings_from_spec
from trimtab.admission.records import (
    AdmissionStats,
    Ask,
    Grant,
    PickReason,
    PodCapacity,
    PodStats,
    Queued,
    Refusal,
    RefusalReason,
    RequestId,
)
from trimtab.admission.settings import AdmissionSettings, AffinityMode

__all__ = [
    "Admission",
    "AdmissionSettings",
    "AdmissionStats",
    "AffinityMode",
    "Ask",
    "Grant",
    "PickReason",
    "PodCapacity",
    "PodStats",
    "Queued",
    "Refusal",
    "RefusalReason",
    "RequestId",
    "pod_capacities",
    "settings_from_spec",
]
