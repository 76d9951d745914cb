"""The demo's figure: per-replica KV usage over time for each mode, and latency CDFs.

One top panel per mode shows every replica's KV usage (model seconds on the x axis, the slow
replica drawn thick); the bottom row holds TTFT and end-to-end CDFs of each mode on log axes.
matplotlib is imported lazily with the Agg backend, so no display is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trimtab_lab.demo.loadgen import Outcome
from trimtab_lab.demo.watching import Sample
from trimtab_lab.sim.plotting import draw_cdfs

__all__ = ["ModeTrace", "plot_demo"]


@dataclass(frozen=True, kw_only=True)
class ModeTrace:
    """What the figure needs of one mode."""

    outcomes: Sequence[Outcome]
    samples: Sequence[Sample]


def plot_demo(
    *,
    modes: Mapping[str, ModeTrace],
    time_scale: float,
    speeds: Sequence[float],
    title: str,
    path: Path,
) -> None:
    """Write the figure to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(modes)
    width = max(len(names), 2)
    figure = plt.figure(figsize=(5 * width, 8), layout="constrained")
    grid = figure.add_gridspec(2, width)
    slowest = min(range(len(speeds)), key=lambda i: speeds[i]) if speeds else -1
    for column, name in enumerate(names):
        axes = figure.add_subplot(grid[0, column])
        samples = modes[name].samples
        at = np.array([s.at_s * time_scale for s in samples])
        for replica in range(len(speeds)):
            kv = np.array([s.replicas[replica].kv for s in samples])
            slow = replica == slowest and speeds[replica] < 1.0
            axes.plot(
                at,
                kv,
                linewidth=2.0 if slow else 0.7,
                color="black" if slow else None,
                label=f"replica {replica} (speed {speeds[replica]:g})" if slow else None,
            )
        axes.set_title(f"{name}: KV usage per replica")
        axes.set_xlabel("model time (s)")
        axes.set_ylim(0, 1.02)
        if slowest >= 0 and speeds[slowest] < 1.0:
            axes.legend(fontsize="small", loc="lower right")
    for offset, label in enumerate(("TTFT", "end-to-end")):
        axes = figure.add_subplot(grid[1, offset * width // 2 : (offset + 1) * width // 2])
        latencies = {}
        for name in names:
            values = [(o.ttft_s if offset == 0 else o.e2e_s) for o in modes[name].outcomes if o.ok]
            latencies[name] = np.array([v * time_scale for v in values if v is not None])
        draw_cdfs(axes=axes, latencies=latencies, xlabel=f"{label} (model s), completed requests")
    figure.suptitle(title)
    figure.savefig(path, dpi=100)
    plt.close(figure)
