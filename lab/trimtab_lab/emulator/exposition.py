"""Render a replica's state as each engine's ``/metrics`` page (Prometheus text format 0.0.4).

Names, types and label sets follow the engines' current releases (vLLM V1, SGLang 0.5.7+,
TGI 3.x, trtllm-serve 1.3+, Triton with the C++ TensorRT-LLM backend; see docs/engines.md), so
whatever reads a real engine reads the emulator unchanged, and nothing appears that no real
engine exports. Only the load signals, their usual neighbours and the KV sizing are emitted;
latency histograms are left out. TGI's ``tgi_batch_current_max_tokens`` is approximated by the
tokens held in KV, since the model does not track each request's reserved maximum. The prefix
cache counters (vLLM ``prefix_cache_queries_total``/``prefix_cache_hits_total``, SGLang's
tokenizer counters ``prompt_tokens_total``/``cached_tokens_total``) count prompt tokens looked
up and found cached when a request is scheduled; with prefix caching off both stay 0, as vLLM's
do (a real SGLang counts its prompt tokens regardless, but runs its radix cache by default).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from trimtab.api.spec import Engine
from trimtab_lab.replica import ReplicaProfile, ReplicaState

__all__ = ["SUPPORTED_ENGINES", "FinishedRequests", "metrics_path", "render_metrics"]

Labels = Mapping[str, str]
Sample = tuple[Labels, float]

_BUCKETS = 10


@dataclass
class FinishedRequests:
    """Output tokens of finished requests, for TGI's ``tgi_request_generated_tokens`` histogram.

    TGI buckets it in even steps up to its max total tokens (100 of them); ten suffice here.
    """

    max_tokens: int
    """Upper end of the buckets (the replica's ``max_model_len``)."""
    count: int = 0
    total: int = 0
    buckets: list[int] = field(default_factory=lambda: [0] * _BUCKETS)

    def observe(self, *, tokens: int) -> None:
        self.count += 1
        self.total += tokens
        for index, bound in enumerate(self.bounds()):
            if tokens <= bound:
                self.buckets[index] += 1

    def bounds(self) -> list[float]:
        return [self.max_tokens * (i + 1) / _BUCKETS for i in range(_BUCKETS)]


def metrics_path(*, engine: Engine) -> str:
    """Where ``engine`` serves Prometheus text (trtllm-serve's ``/metrics`` is JSON)."""
    return "/prometheus/metrics" if engine is Engine.TRTLLM else "/metrics"


def render_metrics(
    *,
    engine: Engine,
    state: ReplicaState,
    profile: ReplicaProfile,
    model: str,
    finished: FinishedRequests | None = None,
) -> str:
    """The page ``engine`` would serve in ``state``; ``ValueError`` for ``custom``."""
    try:
        renderer = _RENDERERS[engine]
    except KeyError:
        raise ValueError(f"the emulator cannot speak engine {engine.value!r}") from None
    found = finished or FinishedRequests(max_tokens=profile.max_model_len)
    return renderer(state, profile, model, found)


def _family(name: str, kind: str, text: str, samples: Sequence[Sample]) -> str:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        rendered = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
        number = repr(float(value))
        lines.append(f"{name}{{{rendered}}} {number}" if labels else f"{name} {number}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _vllm(
    state: ReplicaState, profile: ReplicaProfile, model: str, finished: FinishedRequests
) -> str:
    labels = {"engine": "0", "model_name": model}
    info = {
        "block_size": str(profile.block_size),
        "cache_dtype": "auto",
        "engine": "0",
        "num_gpu_blocks": str(profile.num_gpu_blocks),
    }
    return "".join(
        [
            _family(
                "vllm:num_requests_running",
                "gauge",
                "Number of requests in model execution batches.",
                [(labels, state.running)],
            ),
            _family(
                "vllm:num_requests_waiting",
                "gauge",
                "Number of requests waiting to be processed.",
                [(labels, state.waiting)],
            ),
            _family(
                "vllm:kv_cache_usage_perc",
                "gauge",
                "KV-cache usage. 1 means 100 percent usage.",
                [(labels, state.kv_usage)],
            ),
            _family(
                "vllm:num_preemptions_total",
                "counter",
                "Cumulative number of preemption from the engine.",
                [(labels, state.preemptions_total)],
            ),
            _family(
                "vllm:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                [(labels, state.generated_tokens_total)],
            ),
            _family(
                "vllm:prefix_cache_queries_total",
                "counter",
                "Prefix cache queries, in terms of number of queried tokens.",
                [(labels, state.prefix_queries_total)],
            ),
            _family(
                "vllm:prefix_cache_hits_total",
                "counter",
                "Prefix cache hits, in terms of number of cached tokens.",
                [(labels, state.prefix_hits_total)],
            ),
            _family(
                "vllm:cache_config_info",
                "gauge",
                "Information of the LLMEngine CacheConfig",
                [(info, 1.0)],
            ),
        ]
    )


def _sglang(
    state: ReplicaState, profile: ReplicaProfile, model: str, finished: FinishedRequests
) -> str:
    # The scheduler's label set (moe_ep_rank from 0.5.7); the tokenizer's counters carry only
    # the model name.
    labels = {
        "engine_type": "unified",
        "model_name": model,
        "moe_ep_rank": "0",
        "pp_rank": "0",
        "tp_rank": "0",
    }
    return "".join(
        [
            _family(
                "sglang:num_running_reqs",
                "gauge",
                "The number of running requests.",
                [(labels, state.running)],
            ),
            _family(
                "sglang:num_queue_reqs",
                "gauge",
                "The number of requests in the waiting queue.",
                [(labels, state.waiting)],
            ),
            _family("sglang:token_usage", "gauge", "The token usage.", [(labels, state.kv_usage)]),
            _family(
                "sglang:num_retracted_requests_total",
                "counter",
                "Total number of retracted requests.",
                [(labels, state.preemptions_total)],
            ),
            _family(
                "sglang:max_total_num_tokens",
                "gauge",
                "Maximum total number of tokens in the KV cache pool.",
                [(labels, profile.kv_capacity_tokens)],
            ),
            _family(
                "sglang:generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                [({"model_name": model}, state.generated_tokens_total)],
            ),
            _family(
                "sglang:prompt_tokens_total",
                "counter",
                "Number of prefill tokens processed.",
                [({"model_name": model}, state.prefix_queries_total)],
            ),
            _family(
                "sglang:cached_tokens_total",
                "counter",
                "Number of cached prompt tokens.",
                [({"model_name": model}, state.prefix_hits_total)],
            ),
        ]
    )


def _tgi(
    state: ReplicaState, profile: ReplicaProfile, model: str, finished: FinishedRequests
) -> str:
    held_tokens = state.kv_blocks_used * profile.block_size
    buckets: list[Sample] = [
        ({"le": repr(bound)}, count)
        for bound, count in zip(finished.bounds(), finished.buckets, strict=True)
    ]
    buckets.append(({"le": "+Inf"}, finished.count))
    return "".join(
        [
            _family(
                "tgi_queue_size", "gauge", "Requests waiting in the queue.", [({}, state.waiting)]
            ),
            _family(
                "tgi_batch_current_size", "gauge", "Current batch size.", [({}, state.running)]
            ),
            _family(
                "tgi_batch_current_max_tokens",
                "gauge",
                "Maximum tokens for the current batch.",
                [({}, held_tokens)],
            ),
            _family(
                "tgi_batch_max_total_tokens",
                "gauge",
                "Maximum tokens of a batch, found at warmup.",
                [({}, profile.kv_capacity_tokens)],
            ),
            _histogram(
                "tgi_request_generated_tokens",
                "Generated tokens per finished request.",
                buckets=buckets,
                total=finished.total,
                count=finished.count,
            ),
        ]
    )


def _histogram(
    name: str, text: str, *, buckets: Sequence[Sample], total: float, count: float
) -> str:
    lines = [f"# HELP {name} {text}", f"# TYPE {name} histogram"]
    lines.extend(f'{name}_bucket{{le="{labels["le"]}"}} {float(n)!r}' for labels, n in buckets)
    lines.append(f"{name}_sum {float(total)!r}")
    lines.append(f"{name}_count {float(count)!r}")
    return "\n".join(lines) + "\n"


def _trtllm(
    state: ReplicaState, profile: ReplicaProfile, model: str, finished: FinishedRequests
) -> str:
    labels = {"engine_type": "trtllm", "model_name": model}
    return "".join(
        [
            _family(
                "trtllm_num_requests_running",
                "gauge",
                "Number of requests currently running.",
                [(labels, state.running)],
            ),
            _family(
                "trtllm_num_requests_waiting",
                "gauge",
                "Number of requests waiting to be scheduled.",
                [(labels, state.waiting)],
            ),
            _family(
                "trtllm_kv_cache_utilization",
                "gauge",
                "KV cache utilization, 0..1.",
                [(labels, state.kv_usage)],
            ),
            _family(
                "trtllm_generation_tokens_total",
                "counter",
                "Number of generation tokens processed.",
                [(labels, state.generated_tokens_total)],
            ),
        ]
    )


def _triton(
    state: ReplicaState, profile: ReplicaProfile, model: str, finished: FinishedRequests
) -> str:
    def request(kind: str, value: float) -> Sample:
        return ({"model": model, "request_type": kind, "version": "1"}, value)

    def blocks(kind: str, value: float) -> Sample:
        return ({"kv_cache_block_type": kind, "model": model, "version": "1"}, value)

    used, total = state.kv_blocks_used, state.kv_blocks_total
    return "".join(
        [
            _family(
                "nv_trt_llm_request_metrics",
                "gauge",
                "TRT LLM request metrics",
                [
                    request("active", state.running + state.waiting),
                    request("max", profile.max_num_seqs),
                    request("scheduled", state.running),
                    request("waiting", state.waiting),
                ],
            ),
            _family(
                "nv_trt_llm_kv_cache_block_metrics",
                "gauge",
                "TRT LLM KV cache block metrics",
                [
                    blocks("fraction", state.kv_usage),
                    blocks("free", total - used),
                    blocks("max", total),
                    blocks("tokens_per", profile.block_size),
                    blocks("used", used),
                ],
            ),
        ]
    )


_RENDERERS: dict[Engine, Callable[[ReplicaState, ReplicaProfile, str, FinishedRequests], str]] = {
    Engine.VLLM: _vllm,
    Engine.SGLANG: _sglang,
    Engine.TGI: _tgi,
    Engine.TRTLLM: _trtllm,
    Engine.TRITON_TRTLLM: _triton,
}

SUPPORTED_ENGINES: tuple[Engine, ...] = tuple(_RENDERERS)
"""Engines whose ``/metrics`` page the emulator can serve."""
