"""Engine profiles over real exposition text: names, label filters, sums, maxima, fallbacks.

Covered: every engine (vllm, sglang, tgi, trtllm, triton-trtllm, custom), several models per
pod, vLLM's old KV name, NaN and unreadable values, garbage pages, TGI's KV estimate.
Rates are tested in test_rates.py and against live servers in test_direct.py.
"""

from __future__ import annotations

import math

import pytest

from trimtab.api.spec import CustomMetrics, Engine
from trimtab.metrics.engines import EngineProfile, evaluate, profile_for
from trimtab.metrics.exposition import parse_exposition

from . import samples


def _read(profile: EngineProfile, text: str) -> dict[str, float | None]:
    series = parse_exposition(text=text, names=profile.sample_names())
    return {
        "running": evaluate(signal=profile.running, series=series),
        "waiting": evaluate(signal=profile.waiting, series=series),
        "kv_usage": None
        if profile.kv_usage is None
        else evaluate(signal=profile.kv_usage, series=series),
        "preemptions": None
        if profile.preemptions is None
        else evaluate(signal=profile.preemptions, series=series),
    }


CUSTOM = CustomMetrics(
    running="myengine_active",
    waiting="myengine_queued",
    kv_usage="myengine_kv_ratio",
    preemptions="myengine_evictions_total",
)


@pytest.mark.parametrize(
    ("engine", "text", "expected"),
    [
        (Engine.VLLM, samples.VLLM_TWO_MODELS, (9.0, 4.0, 0.5, 12.0)),
        (Engine.VLLM, samples.VLLM_OLD_KV_NAME, (4.0, 0.0, 0.875, None)),
        (Engine.SGLANG, samples.SGLANG, (12.0, 4.0, 0.71, 9.0)),
        (Engine.TGI, samples.TGI, (16.0, 5.0, None, None)),
        (Engine.TRTLLM, samples.TRTLLM, (20.0, 6.0, 0.9, None)),
        (Engine.TRITON_TRTLLM, samples.TRITON_TRTLLM, (8.0, 3.0, 0.375, None)),
        (Engine.CUSTOM, samples.CUSTOM, (7.0, 2.0, 0.5, 7.0)),
    ],
    ids=["vllm", "vllm-old-kv", "sglang", "tgi", "trtllm", "triton", "custom"],
)
def test_engine_page_reads_as_expected(
    engine: Engine, text: str, expected: tuple[float | None, ...]
) -> None:
    profile = profile_for(engine=engine, custom=CUSTOM if engine is Engine.CUSTOM else None)
    found = _read(profile, text)
    values = (found["running"], found["waiting"], found["kv_usage"], found["preemptions"])
    assert values == pytest.approx(expected)


def test_nan_or_unreadable_component_makes_the_signal_unknown() -> None:
    found = _read(profile_for(engine=Engine.VLLM), samples.VLLM_BROKEN)
    assert found["running"] is None
    assert found["waiting"] is None
    assert found["kv_usage"] == 0.75


@pytest.mark.parametrize("engine", [e for e in Engine if e is not Engine.CUSTOM])
def test_garbage_page_reads_as_unknown(engine: Engine) -> None:
    found = _read(profile_for(engine=engine), samples.GARBAGE)
    assert set(found.values()) == {None}


@pytest.mark.parametrize("value", ["-1", "+Inf", "-Inf", "NaN"])
def test_negative_or_infinite_values_are_unknown(value: str) -> None:
    text = f'vllm:kv_cache_usage_perc{{model_name="m"}} {value}\n'
    assert _read(profile_for(engine=Engine.VLLM), text)["kv_usage"] is None


def test_new_kv_name_wins_over_the_old_one() -> None:
    text = (
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.9\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.1\n'
    )
    assert _read(profile_for(engine=Engine.VLLM), text)["kv_usage"] == 0.1


def test_tgi_kv_is_estimated_from_reserved_tokens_against_a_budget() -> None:
    profile = profile_for(engine=Engine.TGI, tgi_token_budget=64_000)
    assert _read(profile, samples.TGI)["kv_usage"] == pytest.approx(0.75)


def test_custom_engine_without_names_is_refused() -> None:
    with pytest.raises(ValueError, match=r"metrics\.custom"):
        profile_for(engine=Engine.CUSTOM)


def test_parser_keeps_only_wanted_names_and_labels() -> None:
    series = parse_exposition(text=samples.VLLM_TWO_MODELS, names={"vllm:num_requests_running"})
    assert {s.labels["model_name"] for s in series} == {
        "meta-llama/Llama-3.1-8B-Instruct",
        "sql-lora",
    }
    assert all(s.name == "vllm:num_requests_running" for s in series)


def test_unreadable_value_keeps_its_labels_as_nan() -> None:
    (series,) = parse_exposition(
        text='nv_trt_llm_request_metrics{request_type="waiting"} oops\n',
        names={"nv_trt_llm_request_metrics"},
    )
    assert series.labels == {"request_type": "waiting"}
    assert math.isnan(series.value)


def test_decode_tokens_series_per_engine() -> None:
    # vLLM, TGI and trtllm export counters (sources take their rate); SGLang a tokens/s gauge.
    vllm = profile_for(engine=Engine.VLLM).decode_tokens
    sglang = profile_for(engine=Engine.SGLANG).decode_tokens
    tgi = profile_for(engine=Engine.TGI, tgi_token_budget=1000).decode_tokens
    assert vllm is not None and vllm.counter
    assert vllm.selectors[0].name == "vllm:generation_tokens_total"
    assert sglang is not None and not sglang.counter
    assert sglang.selectors[0].name == "sglang:gen_throughput"
    assert tgi is not None and tgi.counter
    trtllm = profile_for(engine=Engine.TRTLLM).decode_tokens
    assert trtllm is not None and trtllm.counter
    assert profile_for(engine=Engine.TRITON_TRTLLM).decode_tokens is None
    page = 'sglang:gen_throughput{model_name="m"} 1234.5\n'
    series = parse_exposition(text=page, names=profile_for(engine=Engine.SGLANG).sample_names())
    assert evaluate(signal=sglang, series=series) == 1234.5
