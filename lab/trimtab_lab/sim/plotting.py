"""Figures of a scenario run: per-replica KV usage over time, and latency CDFs.

Up to three panels of KV usage (round_robin and trimtab first, then the other balancers in
run order) show where load piles up; the last row holds TTFT and end-to-end CDFs of every
balancer on log axes. matplotlib is imported lazily with the Agg backend (no display needed).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trimtab_lab.sim.engine import RequestStatus
from trimtab_lab.sim.running import ScenarioRun

__all__ = ["plot_run"]

_KV_PANELS = 3
_PREFERRED = ("round_robin", "trimtab")


def plot_run(run: ScenarioRun, *, path: Path) -> None:
    """Write the figure for ``run`` to ``path`` (PNG, or any format matplotlib infers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(run.runs)
    shown = [n for n in _PREFERRED if n in names]
    shown += [n for n in names if n not in shown]
    shown = shown[:_KV_PANELS]
    figure = plt.figure(figsize=(5 * max(len(shown), 2), 8), layout="constrained")
    grid = figure.add_gridspec(2, max(len(shown), 2))
    for column, name in enumerate(shown):
        axes = figure.add_subplot(grid[0, column])
        record = run.runs[name].record
        for replica in range(record.kv_usage.shape[1] if record.kv_usage.ndim == 2 else 0):
            axes.plot(record.sample_s, record.kv_usage[:, replica], linewidth=0.6)
        axes.set_title(f"{name}: KV usage per replica")
        axes.set_xlabel("time (s)")
        axes.set_ylim(0, 1.02)
    width = max(len(shown), 2)
    for offset, (label, metric) in enumerate((("TTFT", "first"), ("end-to-end", "finish"))):
        axes = figure.add_subplot(grid[1, offset * width // 2 : (offset + 1) * width // 2])
        latencies = {}
        for name in names:
            record = run.runs[name].record
            until = record.first_token_s if metric == "first" else record.finish_s
            done = np.isfinite(until) & (record.status == RequestStatus.COMPLETED)
            latencies[name] = (until - record.arrival_s)[done]
        draw_cdfs(axes=axes, latencies=latencies, xlabel=f"{label} (s)")
    figure.suptitle(f"{run.scenario.name}: {run.workload.source}")
    figure.savefig(path, dpi=110)
    plt.close(figure)


def draw_cdfs(*, axes: Any, latencies: Mapping[str, np.ndarray], xlabel: str) -> None:
    """One empirical CDF per balancer on log-x axes (shared with the demo's figure)."""
    for name, values in latencies.items():
        latency = np.sort(values)
        if len(latency):
            axes.plot(latency, np.arange(1, len(latency) + 1) / len(latency), label=name)
    axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("fraction of requests")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
