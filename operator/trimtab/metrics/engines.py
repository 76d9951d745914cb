"""What each serving engine calls its load series, and how to fold them into one number.

An :class:`EngineProfile` lists, per signal (running, waiting, KV usage, preemptions, decode
tokens), the
series to read in order of preference (vLLM's ``kv_cache_usage_perc`` before the older
``gpu_cache_usage_perc``) with their label filters (Triton's ``request_type="waiting"``).
Both sources share :func:`combine`, so a pod reads the same through Prometheus as directly:
several models on one pod are summed for running/waiting and maxed for KV usage, and a
NaN, infinite or negative component makes the whole signal unknown rather than wrong.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trimtab.api.spec import CustomMetrics, Engine
from trimtab.metrics.exposition import Series

__all__ = [
    "Aggregation",
    "EngineProfile",
    "Selector",
    "Signal",
    "combine",
    "evaluate",
    "profile_for",
]


class Aggregation(enum.Enum):
    SUM = enum.auto()
    """Requests add up across the models (``model_name``) served by one pod."""
    MAX = enum.auto()
    """Occupancy: the fullest cache is what limits the pod."""


@dataclass(frozen=True, kw_only=True)
class Selector:
    """One series name plus exact-match label filters, e.g. ``request_type="waiting"``."""

    name: str
    """Sample name as Prometheus stores it (counters end in ``_total``)."""
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, *, name: str, labels: Mapping[str, str]) -> bool:
        return name == self.name and all(labels.get(k) == v for k, v in self.labels)


@dataclass(frozen=True, kw_only=True)
class Signal:
    """One number per pod: the first selector that has any series on the pod is used."""

    selectors: tuple[Selector, ...]
    """Candidates in order of preference (fallbacks for renamed metrics)."""
    aggregation: Aggregation
    scale: float = 1.0
    """Multiplier after aggregation, e.g. ``1 / token_budget`` to turn tokens into a fraction."""
    counter: bool = False
    """A counter that sources turn into a rate per second (``rate()``); else a gauge read as is."""


@dataclass(frozen=True, kw_only=True)
class EngineProfile:
    """The series one engine exports; ``None`` where the engine has no such signal."""

    engine: Engine
    running: Signal
    waiting: Signal
    kv_usage: Signal | None
    preemptions: Signal | None
    """A counter (or sum of counters): sources turn it into a rate per second."""
    decode_tokens: Signal | None = None
    """Output tokens generated: a counter (vLLM) turned into tokens/s, or a tokens/s gauge."""

    def signals(self) -> tuple[Signal, ...]:
        found = (self.running, self.waiting, self.kv_usage, self.preemptions, self.decode_tokens)
        return tuple(signal for signal in found if signal is not None)

    def sample_names(self) -> frozenset[str]:
        return frozenset(sel.name for signal in self.signals() for sel in signal.selectors)


def _one(name: str, aggregation: Aggregation, **labels: str) -> Signal:
    return Signal(
        selectors=(Selector(name=name, labels=tuple(sorted(labels.items()))),),
        aggregation=aggregation,
    )


def _counter(*names: str) -> Signal:
    return Signal(
        selectors=tuple(Selector(name=name) for name in names), aggregation=_SUM, counter=True
    )


_SUM, _MAX = Aggregation.SUM, Aggregation.MAX

_PROFILES: dict[Engine, EngineProfile] = {
    Engine.VLLM: EngineProfile(
        engine=Engine.VLLM,
        running=_one("vllm:num_requests_running", _SUM),
        waiting=_one("vllm:num_requests_waiting", _SUM),
        kv_usage=Signal(
            selectors=(
                Selector(name="vllm:kv_cache_usage_perc"),
                # vLLM < 0.10 (V0 engine) exported this name instead.
                Selector(name="vllm:gpu_cache_usage_perc"),
            ),
            aggregation=_MAX,
        ),
        preemptions=_one("vllm:num_preemptions_total", _SUM),
        decode_tokens=_counter("vllm:generation_tokens_total"),
    ),
    Engine.SGLANG: EngineProfile(
        engine=Engine.SGLANG,
        running=_one("sglang:num_running_reqs", _SUM),
        waiting=_one("sglang:num_queue_reqs", _SUM),
        kv_usage=_one("sglang:token_usage", _MAX),
        # SGLang calls preemption "retraction"; ``num_retracted_reqs`` is a per-batch gauge.
        preemptions=_one("sglang:num_retracted_requests_total", _SUM),
        # The gauge is SGLang's own tokens/s over its last decode log interval.
        decode_tokens=_one("sglang:gen_throughput", _SUM),
    ),
    Engine.TGI: EngineProfile(
        engine=Engine.TGI,
        running=_one("tgi_batch_current_size", _SUM),
        waiting=_one("tgi_queue_size", _SUM),
        kv_usage=None,
        preemptions=None,
        # A histogram of tokens per finished request: its _sum counts tokens at completion.
        decode_tokens=_counter(
            "tgi_request_generated_tokens_sum", "tgi_request_generated_tokens_total"
        ),
    ),
    Engine.TRTLLM: EngineProfile(
        engine=Engine.TRTLLM,
        running=_one("trtllm_num_requests_running", _SUM),
        waiting=_one("trtllm_num_requests_waiting", _SUM),
        kv_usage=_one("trtllm_kv_cache_utilization", _MAX),
        preemptions=None,
    ),
    Engine.TRITON_TRTLLM: EngineProfile(
        engine=Engine.TRITON_TRTLLM,
        running=_one("nv_trt_llm_request_metrics", _SUM, request_type="scheduled"),
        waiting=_one("nv_trt_llm_request_metrics", _SUM, request_type="waiting"),
        kv_usage=_one("nv_trt_llm_kv_cache_block_metrics", _MAX, kv_cache_block_type="fraction"),
        preemptions=None,
    ),
}

# TGI exports no KV gauge; the tokens reserved by the current batch over the server's
# ``--max-batch-total-tokens`` is the closest it gets.
_TGI_RESERVED_TOKENS = "tgi_batch_current_max_tokens"


def profile_for(
    *, engine: Engine, custom: CustomMetrics | None = None, tgi_token_budget: int | None = None
) -> EngineProfile:
    """The profile of ``engine``.

    ``custom`` is required for :attr:`Engine.CUSTOM`. ``tgi_token_budget`` (TGI's
    ``--max-batch-total-tokens``) enables a KV estimate for TGI; without it TGI's KV usage is
    ``None``, which the policy treats as "unknown" and balances on running/waiting alone.
    """
    if engine is Engine.CUSTOM:
        if custom is None:
            raise ValueError("engine custom needs metrics.custom with the metric names")
        return EngineProfile(
            engine=engine,
            running=_one(custom.running, _SUM),
            waiting=_one(custom.waiting, _SUM),
            kv_usage=None if custom.kv_usage is None else _one(custom.kv_usage, _MAX),
            preemptions=None if custom.preemptions is None else _one(custom.preemptions, _SUM),
        )
    profile = _PROFILES[engine]
    if engine is Engine.TGI and tgi_token_budget is not None:
        if tgi_token_budget <= 0:
            raise ValueError(f"tgi_token_budget must be positive, got {tgi_token_budget}")
        kv = Signal(
            selectors=(Selector(name=_TGI_RESERVED_TOKENS),),
            aggregation=_MAX,
            scale=1.0 / tgi_token_budget,
        )
        return EngineProfile(
            engine=engine,
            running=profile.running,
            waiting=profile.waiting,
            kv_usage=kv,
            preemptions=None,
            decode_tokens=profile.decode_tokens,
        )
    return profile


def combine(*, signal: Signal, candidates: Sequence[Iterable[float]]) -> float | None:
    """Fold the values found per selector (same order as ``signal.selectors``) into one number.

    The first selector with any value wins. Any unusable value (NaN, ±inf, negative) makes the
    result ``None``: a sum missing one model would understate load and look like headroom.
    """
    for found in candidates:
        values = list(found)
        if not values:
            continue
        if not all(math.isfinite(v) and v >= 0 for v in values):
            return None
        total = sum(values) if signal.aggregation is Aggregation.SUM else max(values)
        return total * signal.scale
    return None


def evaluate(*, signal: Signal, series: Sequence[Series]) -> float | None:
    """:func:`combine` over one pod's parsed series."""
    return combine(
        signal=signal,
        candidates=[
            [s.value for s in series if sel.matches(name=s.name, labels=s.labels)]
            for sel in signal.selectors
        ],
    )
