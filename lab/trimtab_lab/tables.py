"""The results table that ``trimtab sim`` and ``trimtab demo`` print: one row per balancer,
one right-aligned column per key of the results JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["cell", "results_table", "table_console"]


def table_console() -> Console:
    """A console on stdout; piped or captured output gets a width at which no column wraps."""
    console = Console()
    return console if console.is_terminal else Console(width=132)


def results_table(
    *,
    title: str,
    results: Mapping[str, Mapping[str, object]],
    columns: Sequence[tuple[str, str]],
) -> Table:
    """``results`` maps a balancer to its JSON object; ``columns`` are (key, heading) pairs."""
    table = Table(title=Text(title))
    table.add_column("policy")
    for _, heading in columns:
        table.add_column(heading, justify="right")
    for name, values in results.items():
        table.add_row(name, *(cell(values[key]) for key, _ in columns))
    return table


def cell(value: object) -> str:
    """``-`` for a missing figure, three significant digits, whole numbers from 1000 up."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)
