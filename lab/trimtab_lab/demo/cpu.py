"""CPU use of the demo's processes, from ``/proc``: is the machine measuring balancing?

If the emulators, Envoy or the load generator saturate a core, latencies measure Python and
not the balancer, so the demo reports each component's average CPU over a mode. On systems
without ``/proc`` the meter reports nothing rather than failing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["CpuMeter"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # Fields 14 and 15 of stat (utime, stime), counted after the ")" that ends the name.
    return (int(fields[11]) + int(fields[12])) / _TICKS


class CpuMeter:
    """Average CPU (1.0 = one full core) of named processes between start and :meth:`read`."""

    def __init__(self, *, pids: Mapping[str, int]) -> None:
        self._pids = dict(pids)
        self._wall = time.monotonic()
        self._start = {name: _cpu_seconds(pid) for name, pid in self._pids.items()}

    def read(self) -> dict[str, float]:
        """Cores used by each process since the meter was made (missing ones left out)."""
        elapsed = max(time.monotonic() - self._wall, 1e-6)
        used: dict[str, float] = {}
        for name, pid in self._pids.items():
            before, now = self._start[name], _cpu_seconds(pid)
            if before is not None and now is not None:
                used[name] = round((now - before) / elapsed, 3)
        return used
