"""Readers for recorded request traces: Azure LLM CSV, Mooncake JSONL and a generic CSV.

Each returns a :class:`~trimtab_lab.sim.workloads.base.Workload` whose first arrival is at 0 s,
sorted by arrival. A malformed row raises :class:`~trimtab_lab.sim.errors.WorkloadError` naming
the file, the 1-based line and the field; nothing is silently skipped.
"""

from __future__ import annotations

import csv
import datetime
import enum
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from trimtab_lab.sim.errors import WorkloadError
from trimtab_lab.sim.workloads.base import Workload

__all__ = ["MOONCAKE_BLOCK_TOKENS", "TraceFormat", "read_trace"]

MOONCAKE_BLOCK_TOKENS = 512
"""Prompt tokens per ``hash_ids`` entry in the Mooncake traces (FAST'25 release README)."""


class TraceFormat(enum.StrEnum):
    """Supported trace layouts."""

    AZURE = "azure"
    """``TIMESTAMP,ContextTokens,GeneratedTokens``; wall-clock timestamps."""
    MOONCAKE = "mooncake"
    """JSON lines with ``timestamp`` (ms), ``input_length``, ``output_length`` and optional
    ``hash_ids`` (one id per 512-token prompt block; equal ids mean a shared prefix)."""
    CSV = "csv"
    """``arrival_s,prompt_tokens,output_tokens``; seconds from any origin."""


def read_trace(*, path: Path, trace_format: TraceFormat) -> Workload:
    """Read a whole trace; ``WorkloadError`` for a missing file, bad header or bad row."""
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(_ROW_READERS[trace_format](path, handle))
    except OSError as error:
        raise WorkloadError(f"cannot read trace: {error.strerror}", path=path) from error
    except UnicodeDecodeError as error:
        raise WorkloadError("trace is not UTF-8 text", path=path) from error
    if not rows:
        raise WorkloadError("trace has no requests", path=path)
    rows.sort(key=lambda row: row[0])
    arrival = np.array([row[0] for row in rows], dtype=np.float64)
    hashes = None
    if trace_format is TraceFormat.MOONCAKE:
        hashes = tuple(row[3] for row in rows)
    return Workload(
        arrival_s=arrival - arrival[0],
        prompt_tokens=np.array([row[1] for row in rows], dtype=np.int64),
        output_tokens=np.array([row[2] for row in rows], dtype=np.int64),
        source=path.name,
        block_hashes=hashes,
        prefix_block_tokens=MOONCAKE_BLOCK_TOKENS,
    )


_Row = tuple[float, int, int, tuple[int, ...]]


def _csv_rows(
    path: Path, handle: Iterator[str], *, columns: tuple[str, str, str]
) -> Iterator[tuple[int, dict[str, str]]]:
    reader = csv.DictReader(handle)
    missing = [name for name in columns if name not in (reader.fieldnames or [])]
    if missing:
        raise WorkloadError(
            f"header lacks column(s) {', '.join(missing)}; expected {','.join(columns)}",
            path=path,
            line=1,
        )
    for record in reader:
        yield reader.line_num, record


def _azure(path: Path, handle: Iterator[str]) -> Iterator[_Row]:
    columns = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
    for line, record in _csv_rows(path, handle, columns=columns):
        stamp = record["TIMESTAMP"]
        try:
            # Python reads up to 6 fractional digits; the traces carry 7 (100 ns).
            moment = datetime.datetime.fromisoformat(stamp.strip()).replace(tzinfo=datetime.UTC)
        except (ValueError, AttributeError):
            raise WorkloadError(
                f"not a timestamp: {stamp!r}", path=path, line=line, field="TIMESTAMP"
            ) from None
        yield (
            moment.timestamp(),
            _count(record["ContextTokens"], path=path, line=line, field="ContextTokens"),
            _count(record["GeneratedTokens"], path=path, line=line, field="GeneratedTokens"),
            (),
        )


def _generic(path: Path, handle: Iterator[str]) -> Iterator[_Row]:
    columns = ("arrival_s", "prompt_tokens", "output_tokens")
    for line, record in _csv_rows(path, handle, columns=columns):
        yield (
            _seconds(record["arrival_s"], path=path, line=line, field="arrival_s"),
            _count(record["prompt_tokens"], path=path, line=line, field="prompt_tokens"),
            _count(record["output_tokens"], path=path, line=line, field="output_tokens"),
            (),
        )


def _mooncake(path: Path, handle: Iterator[str]) -> Iterator[_Row]:
    for line, text in enumerate(handle, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as error:
            raise WorkloadError(f"not JSON: {error.msg}", path=path, line=line) from None
        if not isinstance(record, dict):
            raise WorkloadError("expected a JSON object", path=path, line=line)
        for name in ("timestamp", "input_length", "output_length"):
            if name not in record:
                raise WorkloadError("missing", path=path, line=line, field=name)
        millis = _seconds(record["timestamp"], path=path, line=line, field="timestamp")
        yield (
            millis / 1000.0,
            _count(record["input_length"], path=path, line=line, field="input_length"),
            _count(record["output_length"], path=path, line=line, field="output_length"),
            _hash_ids(record.get("hash_ids", []), path=path, line=line),
        )


def _hash_ids(value: object, *, path: Path, line: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    ):
        raise WorkloadError(
            "must be a list of integers >= 0", path=path, line=line, field="hash_ids"
        )
    return tuple(value)


_ROW_READERS = {
    TraceFormat.AZURE: _azure,
    TraceFormat.MOONCAKE: _mooncake,
    TraceFormat.CSV: _generic,
}


def _count(value: object, *, path: Path, line: int, field: str) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise WorkloadError(
            f"not an integer: {value!r}", path=path, line=line, field=field
        ) from None
    if isinstance(number, bool) or number < 1:
        raise WorkloadError(f"must be >= 1, got {value!r}", path=path, line=line, field=field)
    return number


def _seconds(value: object, *, path: Path, line: int, field: str) -> float:
    try:
        number = float(str(value).strip())
    except ValueError:
        raise WorkloadError(f"not a number: {value!r}", path=path, line=line, field=field) from None
    if not np.isfinite(number) or number < 0:
        raise WorkloadError(
            f"must be finite and >= 0, got {value!r}", path=path, line=line, field=field
        )
    return number
