"""The demo reads a vLLM page the way the operator does (trimtab.metrics' vLLM profile)."""

from __future__ import annotations

from trimtab_lab.demo.watching import ReplicaLoad, parse_vllm_metrics

PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} 3.0
vllm:num_requests_running{model_name="b"} 2.0
vllm:num_requests_waiting{model_name="a"} 4.0
vllm:gpu_cache_usage_perc{model_name="a"} 0.25
vllm:gpu_cache_usage_perc{model_name="b"} 0.5
vllm:num_preemptions_total{model_name="a"} 7.0
vllm:unrelated_histogram_bucket{le="+Inf"} not-a-number
"""


def test_models_are_summed_and_the_fullest_cache_counts() -> None:
    assert parse_vllm_metrics(PAGE) == ReplicaLoad(
        running=5.0, waiting=4.0, kv=0.5, preemptions=7.0
    )


def test_an_unusable_value_reads_as_zero_not_as_part_of_a_sum() -> None:
    page = PAGE.replace(
        'vllm:num_requests_running{model_name="b"} 2.0',
        'vllm:num_requests_running{model_name="b"} NaN',
    )
    assert parse_vllm_metrics(page).running == 0.0


def test_an_empty_page_is_an_idle_replica() -> None:
    assert parse_vllm_metrics("") == ReplicaLoad()
