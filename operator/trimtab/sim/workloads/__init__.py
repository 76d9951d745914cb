"""Workloads for the fleet simulator: trace readers, declared mixes and time-axis transforms.

Every producer returns a :class:`Workload` (parallel numpy arrays). Utilisation is defined in
:mod:`trimtab.sim.workloads.capacity` and documented in ``docs/simulator.md``.
"""

from trimtab.sim.workloads.base import Workload
from trimtab.sim.workloads.capacity import KV_FILL, ReplicaSpec, max_request_rate
from trimtab.sim.workloads.mixes import Lengths, RequestClass, classic_mix, generate_mix
from trimtab.sim.workloads.shaping import compress, repeat_to, scale_to_utilisation, slice_window
from trimtab.sim.workloads.traces import TraceFormat, read_trace

__all__ = [
    "KV_FILL",
    "Lengths",
    "ReplicaSpec",
    "RequestClass",
    "TraceFormat",
    "Workload",
    "classic_mix",
    "compress",
    "generate_mix",
    "max_request_rate",
    "read_trace",
    "repeat_to",
    "scale_to_utilisation",
    "slice_window",
]
