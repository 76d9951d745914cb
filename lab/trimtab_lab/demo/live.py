"""Live progress of the demo: per-replica load bars for running, waiting and KV usage.

:class:`LiveState` is written by the harness (current mode, watcher, counts) and read by
:func:`render`, which rich's ``Live`` calls a few times a second from its refresh thread.
Reads are of whole immutable samples, so a half-updated state is never drawn.
"""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from trimtab_lab.demo.watching import FleetWatcher

__all__ = ["LiveState", "progress_line", "render"]

_BAR = 24


class LiveState:
    """What the live view shows; the harness updates it as the run goes."""

    def __init__(self) -> None:
        self.mode = ""
        self.mode_index = 0
        self.modes = 0
        self.watcher: FleetWatcher | None = None
        self.speeds: tuple[float, ...] = ()
        self.sent_total = 0
        self.done = 0
        self.failed = 0
        self.started = time.monotonic()
        self.phase = "starting"


def _bar(fraction: float, *, style: str) -> Text:
    filled = round(max(0.0, min(1.0, fraction)) * _BAR)
    return Text("█" * filled, style=style) + Text("░" * (_BAR - filled), style="dim")


def progress_line(state: LiveState) -> str:
    """One line of progress, for output that is not a terminal (no live bars there)."""
    elapsed = time.monotonic() - state.started
    return (
        f"{elapsed:5.0f}s  mode {state.mode_index}/{state.modes}: {state.mode or '-'} "
        f"({state.phase})  done {state.done}/{state.sent_total}  failed {state.failed}"
    )


def render(state: LiveState) -> RenderableType:
    """The current view: a header line, one row per replica and the bars' scale."""
    header = Text(progress_line(state), style="bold")
    table = Table(box=None, pad_edge=False)
    for column in ("replica", "speed", "running", "", "waiting", "", "KV", ""):
        table.add_column(column)
    loads = state.watcher.latest if state.watcher is not None else ()
    peak_running = max([1.0, *(r.running for r in loads)])
    peak_waiting = max([1.0, *(r.waiting for r in loads)])
    for index, load in enumerate(loads):
        speed = state.speeds[index] if index < len(state.speeds) else 1.0
        table.add_row(
            str(index),
            f"{speed:g}",
            _bar(load.running / peak_running, style="green"),
            f"{load.running:4.0f}",
            _bar(load.waiting / peak_waiting, style="yellow"),
            f"{load.waiting:4.0f}",
            _bar(load.kv, style="red" if load.kv > 0.9 else "cyan"),
            f"{load.kv:4.0%}",
        )
    # Running and waiting bars are relative to the busiest replica of the moment, so the
    # scale moves; KV is absolute.
    scale = Text(
        f"full bar: running {peak_running:g} requests, waiting {peak_waiting:g} requests "
        "(the busiest replica now); KV 100 % of the replica's KV cache",
        style="dim",
    )
    return Group(header, table, scale)
