"""Workloads for the fleet simulator: trace readers, declared mixes and time-axis transforms.

Every producer returns a :class:`Workload` (parallel numpy arrays). Utilisation is defined in
:mod:`trimtab_lab.sim.workloads.capacity` and documented in ``docs/simulator.md``.
"""

from trimtab_lab.sim.workloads.base import Workload
from trimtab_lab.sim.workloads.capacity import KV_FILL, ReplicaSpec, max_request_rate
from trimtab_lab.sim.workloads.mixes import Lengths, RequestClass, classic_mix, generate_mix
from trimtab_lab.sim.workloads.shaping import (
    compress,
    repeat_to,
    scale_to_utilisation,
    slice_window,
)
from trimtab_lab.sim.workloads.traces import TraceFormat, read_trace

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
