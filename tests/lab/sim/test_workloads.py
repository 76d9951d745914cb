"""Workloads: trace readers (real traces and malformed ones), mixes and time transforms.

Malformed inputs are table-driven: each case must raise a WorkloadError naming the file, the
line and the field. The real traces are read whole once (they are small) and sliced.
"""

from __future__ import annotations

import numpy as np
import pytest

from trimtab_lab.replica import get_profile
from trimtab_lab.sim.errors import WorkloadError
from trimtab_lab.sim.workloads import (
    ReplicaSpec,
    TraceFormat,
    classic_mix,
    compress,
    generate_mix,
    max_request_rate,
    read_trace,
    repeat_to,
    scale_to_utilisation,
    slice_window,
)

MALFORMED = [
    ("azure", "a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:00:00.0,5\n", 1, ""),
    ("azure", "b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n", 2, "TIMESTAMP"),
    (
        "azure",
        "c.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:00:00.0,5,5\n"
        "2023-11-16 18:00:01.0,5,0\n",
        3,
        "GeneratedTokens",
    ),
    ("csv", "d.csv", "arrival_s,prompt_tokens,output_tokens\n-1,5,5\n", 2, "arrival_s"),
    ("csv", "e.csv", "arrival_s,prompt_tokens,output_tokens\n0,five,5\n", 2, "prompt_tokens"),
    ("mooncake", "f.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 5}\n{', 2, ""),
    ("mooncake", "g.jsonl", '{"timestamp": 0, "input_length": 5}\n', 1, "output_length"),
    (
        "mooncake",
        "h.jsonl",
        '{"timestamp": 0, "input_length": 0, "output_length": 5}\n',
        1,
        "input_length",
    ),
]


@pytest.mark.parametrize(("fmt", "name", "text", "line", "field"), MALFORMED)
def test_malformed_traces_name_file_line_and_field(tmp_path, fmt, name, text, line, field):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(WorkloadError) as caught:
        read_trace(path=path, trace_format=TraceFormat(fmt))
    message = str(caught.value)
    assert name in message
    assert f"line {line}" in message
    assert caught.value.line == line
    assert caught.value.field == field


def test_missing_trace_file_is_named(tmp_path):
    with pytest.raises(WorkloadError, match=r"nothing\.csv"):
        read_trace(path=tmp_path / "nothing.csv", trace_format=TraceFormat.CSV)


@pytest.mark.parametrize(
    ("name", "fmt", "rows"),
    [
        ("azure-llm-2023-conv.csv", "azure", 19_366),
        ("azure-llm-2023-code.csv", "azure", 8_819),
        ("mooncake-conversation.jsonl", "mooncake", 12_031),
    ],
)
def test_real_traces_read_whole_and_slice(traces, name, fmt, rows):
    trace = read_trace(path=traces / name, trace_format=TraceFormat(fmt))
    assert len(trace) == rows
    assert trace.arrival_s[0] == 0.0
    first_minute = slice_window(trace, duration_s=60.0)
    assert 0 < len(first_minute) < rows
    assert first_minute.arrival_s.max() < 60.0


def test_generic_csv_is_sorted_and_rebased(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n12.5,10,3\n10,20,4\n")
    trace = read_trace(path=path, trace_format=TraceFormat.CSV)
    assert trace.arrival_s.tolist() == [0.0, 2.5]
    assert trace.prompt_tokens.tolist() == [20, 10]


def test_compress_and_repeat_keep_sizes_and_cover_the_duration(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,3\n1,20,4\n2,30,5\n")
    trace = read_trace(path=path, trace_format=TraceFormat.CSV)
    fast = compress(trace, factor=2.0)
    assert fast.arrival_s.tolist() == [0.0, 0.5, 1.0]
    long = repeat_to(fast, duration_s=4.0)
    assert long.arrival_s.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    assert long.prompt_tokens.tolist() == [10, 20, 30, 10, 20, 30, 10, 20]


def test_scaling_to_utilisation_hits_the_target_rate(traces):
    trace = read_trace(path=traces / "azure-llm-2023-conv.csv", trace_format=TraceFormat.AZURE)
    fleet = [ReplicaSpec(profile=get_profile("llama3-8b-h100"))] * 4
    scaled = scale_to_utilisation(trace, utilisation=0.5, replicas=fleet, duration_s=120.0)
    target = 0.5 * max_request_rate(
        replicas=fleet, prompt_tokens=trace.prompt_tokens, output_tokens=trace.output_tokens
    )
    assert len(scaled) / 120.0 == pytest.approx(target, rel=0.25)
    assert scaled.arrival_s.max() < 120.0


def test_mix_is_deterministic_bursty_and_has_the_stated_shape():
    classes = classic_mix()
    one = generate_mix(classes=classes, rate_per_s=50, duration_s=600, cv=3.0, seed=4)
    two = generate_mix(classes=classes, rate_per_s=50, duration_s=600, cv=3.0, seed=4)
    assert np.array_equal(one.arrival_s, two.arrival_s)
    assert np.array_equal(one.output_tokens, two.output_tokens)
    gaps = np.diff(one.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.2)
    assert len(one) / 600 == pytest.approx(50, rel=0.2)
    short = np.mean(one.output_tokens <= 16)
    agents = np.mean(one.output_tokens >= 5000)
    assert short == pytest.approx(0.55, abs=0.05)
    assert agents == pytest.approx(0.10, abs=0.03)
