"""Parse Prometheus text exposition into plain series, tolerating garbage.

A pod's ``/metrics`` page can hold hundreds of histogram lines we never use, and one broken
line makes ``prometheus_client``'s parser give up on everything after it. So lines are first
filtered by the sample names a profile wants, and each kept line is parsed on its own. A wanted
line whose value cannot be read becomes NaN rather than vanishing, so that a sum over models
turns unknown instead of silently shrinking.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Series", "parse_exposition"]


@dataclass(frozen=True, kw_only=True)
class Series:
    """One sample line: its sample name (``_total`` included for counters), labels and value."""

    name: str
    labels: Mapping[str, str]
    value: float
    """As exposed; may be NaN, infinite or negative (cleaning happens in :mod:`engines`)."""


def parse_exposition(*, text: str, names: Collection[str]) -> list[Series]:
    """The samples of ``text`` whose sample name is in ``names``; unparsable lines are skipped."""
    wanted = frozenset(names)
    series: list[Series] = []
    for line in text.splitlines():
        if _sample_name(line) not in wanted:
            continue
        series.extend(_parse_line(line=line, wanted=wanted))
    return series


def _parse_line(*, line: str, wanted: frozenset[str]) -> list[Series]:
    parsed = _try_parse(line)
    if parsed is None:
        # Keep the labels if only the value is broken, so label filters still apply.
        head = line[: line.rindex("}") + 1] if "}" in line else _sample_name(line)
        parsed = _try_parse(f"{head} NaN") or [
            Series(name=_sample_name(line), labels={}, value=math.nan)
        ]
    return [s for s in parsed if s.name in wanted]


def _try_parse(line: str) -> list[Series] | None:
    try:
        return [
            Series(name=sample.name, labels=dict(sample.labels), value=float(sample.value))
            for family in text_string_to_metric_families(line + "\n")
            for sample in family.samples
        ]
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def _sample_name(line: str) -> str:
    """The metric name a sample line starts with; empty for comments and blank lines."""
    stripped = line.lstrip()
    if not stripped or stripped.startswith("#"):
        return ""
    end = len(stripped)
    for stop in ("{", " ", "\t"):
        index = stripped.find(stop)
        if index != -1:
            end = min(end, index)
    return stripped[:end]
