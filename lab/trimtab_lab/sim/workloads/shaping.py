"""Transforms of a workload's time axis: windows, compression, repetition, target utilisation.

Transforms never touch request sizes, only arrival times, so a scaled trace keeps the real mix
of short and long requests. Scaling a trace to a utilisation compresses (or stretches) time,
then repeats the trace if it became shorter than the run, and cuts it to the run's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from trimtab_lab.sim.workloads.base import Workload
from trimtab_lab.sim.workloads.capacity import ReplicaSpec, max_request_rate

__all__ = ["compress", "repeat_to", "scale_to_utilisation", "slice_window"]


def slice_window(workload: Workload, *, duration_s: float, start_s: float = 0.0) -> Workload:
    """Requests arriving in ``[start_s, start_s + duration_s)``, shifted to start at 0."""
    arrival = workload.arrival_s
    keep = (arrival >= start_s) & (arrival < start_s + duration_s)
    return _subset(workload, keep=keep, arrival_s=arrival[keep] - start_s)


def _subset(workload: Workload, *, keep: npt.NDArray[np.bool_], arrival_s: np.ndarray) -> Workload:
    hashes = workload.block_hashes
    return replace(
        workload,
        arrival_s=arrival_s,
        prompt_tokens=workload.prompt_tokens[keep],
        output_tokens=workload.output_tokens[keep],
        block_hashes=None
        if hashes is None
        else tuple(h for h, k in zip(hashes, keep, strict=True) if k),
        sessions=None if workload.sessions is None else workload.sessions[keep],
    )


def compress(workload: Workload, *, factor: float) -> Workload:
    """The same requests arriving ``factor`` times faster (``factor < 1`` slows them down)."""
    if not factor > 0:
        raise ValueError(f"factor must be > 0, got {factor!r}")
    return replace(
        workload, arrival_s=workload.arrival_s / factor, source=f"{workload.source} x{factor:.3g}"
    )


def repeat_to(workload: Workload, *, duration_s: float) -> Workload:
    """The workload repeated back to back until it covers ``duration_s``, then cut there.

    One period is the span plus one mean gap, so the seam looks like any other arrival. Every
    copy after the first is new conversations: its block hashes and sessions are renumbered, so
    no copy finds another's prefixes cached.
    """
    count = len(workload)
    if count == 0:
        raise ValueError("cannot repeat an empty workload")
    period = workload.span_s * count / max(count - 1, 1) if count > 1 else max(duration_s, 1.0)
    copies = max(1, int(np.ceil(duration_s / period)))
    offsets = np.repeat(np.arange(copies, dtype=np.float64) * period, count)
    hashes = workload.block_hashes
    if hashes is not None:
        stride = 1 + max((max(h) for h in hashes if h), default=0)
        hashes = tuple(
            tuple(block + copy * stride for block in chain)
            for copy in range(copies)
            for chain in hashes
        )
    sessions = workload.sessions
    if sessions is not None:
        stride = 1 + max(int(sessions.max(initial=0)), 0)
        sessions = np.concatenate(
            [np.where(sessions >= 0, sessions + copy * stride, -1) for copy in range(copies)]
        ).astype(np.int64)
    repeated = replace(
        workload,
        arrival_s=np.tile(workload.arrival_s, copies) + offsets,
        prompt_tokens=np.tile(workload.prompt_tokens, copies),
        output_tokens=np.tile(workload.output_tokens, copies),
        source=workload.source if copies == 1 else f"{workload.source} repeated {copies}x",
        block_hashes=hashes,
        sessions=sessions,
    )
    return slice_window(repeated, duration_s=duration_s)


def scale_to_utilisation(
    workload: Workload,
    *,
    utilisation: float,
    replicas: Sequence[ReplicaSpec],
    duration_s: float,
) -> Workload:
    """Compress the workload so its rate is ``utilisation`` of the fleet's, over ``duration_s``."""
    if not utilisation > 0:
        raise ValueError(f"utilisation must be > 0, got {utilisation!r}")
    if len(workload) < 2 or workload.span_s <= 0:
        raise ValueError("a workload needs two or more distinct arrival times to be rescaled")
    target = utilisation * max_request_rate(
        replicas=replicas,
        prompt_tokens=workload.prompt_tokens,
        output_tokens=workload.output_tokens,
    )
    current = (len(workload) - 1) / workload.span_s
    return repeat_to(compress(workload, factor=target / current), duration_s=duration_s)
