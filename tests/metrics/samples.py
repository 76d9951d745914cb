"""Exposition pages as each engine serves them, trimmed to a few series plus some noise.

Label sets and HELP/TYPE lines follow what the engines print (vLLM V1, SGLang, TGI 3.x,
trtllm-serve, Triton's TensorRT-LLM backend); values are chosen so sums and maxima are exact.
"""

from __future__ import annotations

VLLM_TWO_MODELS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
vllm:num_requests_running{engine="0",model_name="sql-lora"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="0",model_name="sql-lora"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.25
vllm:kv_cache_usage_perc{engine="0",model_name="sql-lora"} 0.5
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:num_preemptions_total{engine="0",model_name="sql-lora"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="sql-lora"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="sql-lora"} 40.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="sql-lora"} 40.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="sql-lora"} 3.2
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",cache_dtype="auto",engine="0",num_gpu_blocks="25000"} 1.0
"""

# vLLM up to 0.9.1: the KV gauge had only its old name.
VLLM_OLD_KV_NAME = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 4.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 0.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.875
"""

# One model's running gauge is NaN, another line is unreadable: both signals become unknown,
# the untouched one survives.
VLLM_BROKEN = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} NaN
vllm:num_requests_running{model_name="b"} 3.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="a"} 1.0
vllm:num_requests_waiting{model_name="b"} three
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.5
this line is not prometheus at all {{{
vllm:kv_cache_usage_perc{model_name="b"} 0.75
"""

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 12.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 4.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 0.71
# HELP sglang:num_retracted_reqs The number of retracted requests.
# TYPE sglang:num_retracted_reqs gauge
sglang:num_retracted_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 1.0
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 9.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="Qwen/Qwen2.5-7B-Instruct",pp_rank="0",tp_rank="0"} 1450.5
"""  # noqa: E501

TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 5
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 48000
# TYPE tgi_request_count counter
tgi_request_count 1234
# TYPE tgi_batch_inference_duration histogram
tgi_batch_inference_duration_bucket{method="decode",le="0.005"} 10
"""

TRTLLM = """\
# HELP trtllm_num_requests_running Number of requests currently running.
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{engine_type="trtllm",model_name="llama-3.1-8b"} 20.0
# HELP trtllm_num_requests_waiting Number of requests waiting to be scheduled.
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{engine_type="trtllm",model_name="llama-3.1-8b"} 6.0
# HELP trtllm_kv_cache_utilization KV cache utilization, 0..1.
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type="trtllm",model_name="llama-3.1-8b"} 0.9
# HELP trtllm_kv_cache_hit_rate KV cache hit rate.
# TYPE trtllm_kv_cache_hit_rate gauge
trtllm_kv_cache_hit_rate{engine_type="trtllm",model_name="llama-3.1-8b"} 0.2
"""

# Two TensorRT-LLM models in one Triton server; request_type/kv_cache_block_type pick the series.
TRITON_TRTLLM = """\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="llama_a",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="llama_a",request_type="scheduled",version="1"} 6
nv_trt_llm_request_metrics{model="llama_a",request_type="max",version="1"} 64
nv_trt_llm_request_metrics{model="llama_a",request_type="active",version="1"} 9
nv_trt_llm_request_metrics{model="llama_a",request_type="waiting",version="1"} 3
nv_trt_llm_request_metrics{model="llama_b",request_type="scheduled",version="1"} 2
nv_trt_llm_request_metrics{model="llama_b",request_type="waiting",version="1"} 0
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="llama_a",version="1"} 0.375
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="llama_a",version="1"} 4096
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="llama_a",version="1"} 1536
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="llama_b",version="1"} 0.125
# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="llama_a",version="1"} 500
"""

CUSTOM = """\
# TYPE myengine_active gauge
myengine_active{shard="0"} 3
myengine_active{shard="1"} 4
# TYPE myengine_queued gauge
myengine_queued 2
# TYPE myengine_kv_ratio gauge
myengine_kv_ratio 0.5
# TYPE myengine_evictions_total counter
myengine_evictions_total 7
"""

GARBAGE = "\x00\x01<html><body>502 Bad Gateway</body></html>\nvllm:num_requests_running{{{ 1\n"
