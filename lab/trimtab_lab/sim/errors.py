"""Errors of the fleet simulator's inputs: traces, mixes and scenario files.

Each names the file and, where one exists, the line and the field, so a malformed input can be
fixed without reading the simulator's code.
"""

from __future__ import annotations

from pathlib import Path

from trimtab.errors import TrimtabError

__all__ = ["ScenarioError", "SimulationError", "WorkloadError"]


class SimulationError(TrimtabError):
    """Base of the simulator's input errors."""


class WorkloadError(SimulationError):
    """A trace or a workload mix is malformed."""

    def __init__(
        self, message: str, *, path: Path | None = None, line: int | None = None, field: str = ""
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = [str(path)] if path is not None else []
        if line is not None:
            where.append(f"line {line}")
        if field:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ScenarioError(SimulationError):
    """A scenario file is malformed; ``problems`` lists each as ``field.path: message``."""

    def __init__(self, *, path: Path | None, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        prefix = f"{path}: " if path is not None else ""
        super().__init__(prefix + "; ".join(problems))
