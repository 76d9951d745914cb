"""What each serving engine calls its load series, and how to fold them into one number.

An :class:`EngineProfile` lists, per signal (running, waiting, KV usage, preemptions, decode
tokens, prefix-cache queries and hits), the series to read in order of preference (vLLM's
``kv_cache_usage_perc`` before the older ``gpu_cache_usage_perc``) with their label filters
(Triton's ``request_type="waiting"``). Both sources share :func:`combine`, so a pod reads the
same through Prometheus as directly: several models on one pod are summed for running/waiting
and maxed for KV usage, and a NaN, infinite or negative component makes the whole signal
unknown rather than wrong. Which engine version exports what is tabulated in docs/engines.md.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trimtab.api.spec import CustomMetrics, Engine
from trimtab.metrics.exposition import Series

__all__ = [
    "DEFAULT_METRICS_PATH",
    "Aggregation",
    "Capacity",
    "EngineProfile",
    "Selector",
    "Signal",
    "combine",
    "evaluate",
    "hit_rate",
    "profile_for",
    "scrape_path",
]

DEFAULT_METRICS_PATH = "/metrics"
"""The spec's default ``metrics.path``; engines serving Prometheus text elsewhere override it."""


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
        # As in PromQL, ``label=""`` also matches a series without that label.
        return name == self.name and all(labels.get(k, "") == v for k, v in self.labels)


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
    divisor: Selector | None = None
    """A gauge on the same pod to divide by (its maximum), e.g. TGI's token budget; a missing,
    zero or unusable divisor makes the signal unknown."""


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """Where an engine states its KV-cache size in tokens: a gauge's value, or the product of
    labels of an info series (vLLM's ``cache_config_info{num_gpu_blocks, block_size}``)."""

    name: str
    label_factors: tuple[str, ...] = ()
    """Labels whose numeric values multiply to the size; empty: the series' value is it."""

    def tokens(self, *, series: Sequence[Series]) -> int | None:
        """The smallest size among the pod's matching series (several engines, one pod)."""
        sizes = []
        for found in series:
            if found.name != self.name:
                continue
            size = found.value if not self.label_factors else 1.0
            for label in self.label_factors:
                try:
                    size *= float(found.labels.get(label, "nan"))
                except ValueError:
                    return None
            if not math.isfinite(size) or size < 1:
                return None
            sizes.append(size)
        return int(min(sizes)) if sizes else None


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
    prefix_queries: Signal | None = None
    """Counter of prompt tokens looked up in the prefix cache (with :attr:`prefix_hits`)."""
    prefix_hits: Signal | None = None
    """Counter of those prompt tokens found cached; hits over queries is the hit rate."""
    kv_capacity: Capacity | None = None
    """The KV cache's size in tokens, for the picker's KV budget."""
    metrics_path: str = DEFAULT_METRICS_PATH
    """Where the engine serves Prometheus text when the spec keeps the default path."""

    def signals(self) -> tuple[Signal, ...]:
        found = (
            self.running,
            self.waiting,
            self.kv_usage,
            self.preemptions,
            self.decode_tokens,
            self.prefix_queries,
            self.prefix_hits,
        )
        return tuple(signal for signal in found if signal is not None)

    def sample_names(self) -> frozenset[str]:
        names = {sel.name for signal in self.signals() for sel in signal.selectors}
        names.update(s.divisor.name for s in self.signals() if s.divisor is not None)
        if self.kv_capacity is not None:
            names.add(self.kv_capacity.name)
        return frozenset(names)


def scrape_path(*, profile: EngineProfile, configured: str | None) -> str:
    """The path to scrape: ``configured`` when the spec gives one, else the engine's own.

    trtllm-serve answers ``/metrics`` with JSON iteration stats and serves Prometheus text at
    ``/prometheus/metrics``; an explicit path is taken literally.
    """
    return profile.metrics_path if configured is None else configured


def _one(name: str, aggregation: Aggregation, **labels: str) -> Signal:
    return Signal(
        selectors=(Selector(name=name, labels=tuple(sorted(labels.items()))),),
        aggregation=aggregation,
    )


def _counter(*names: str, **labels: str) -> Signal:
    matchers = tuple(sorted(labels.items()))
    return Signal(
        selectors=tuple(Selector(name=name, labels=matchers) for name in names),
        aggregation=_SUM,
        counter=True,
    )


# With --enable-priority-scheduling (0.5.10+) SGLang exports each queue gauge twice: the total
# under ``priority=""`` and one series per priority. ``priority=""`` also matches the series
# of a server without priority scheduling, which carry no such label.
_SGLANG_TOTAL = {"priority": ""}
_TGI_BATCH_TOKENS = "tgi_batch_current_max_tokens"


_SUM, _MAX = Aggregation.SUM, Aggregation.MAX

_PROFILES: dict[Engine, EngineProfile] = {
    Engine.VLLM: EngineProfile(
        engine=Engine.VLLM,
        running=_one("vllm:num_requests_running", _SUM),
        waiting=_one("vllm:num_requests_waiting", _SUM),
        kv_usage=Signal(
            selectors=(
                Selector(name="vllm:kv_cache_usage_perc"),
                # The only name up to 0.9.1; exported next to the new one until 0.10.x,
                # hidden in 0.11 and removed in 0.12.
                Selector(name="vllm:gpu_cache_usage_perc"),
            ),
            aggregation=_MAX,
        ),
        preemptions=_counter("vllm:num_preemptions_total"),
        decode_tokens=_counter("vllm:generation_tokens_total"),
        # In tokens; the gpu_-prefixed names are the deprecated pre-0.9.2 ones.
        prefix_queries=_counter(
            "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
        ),
        prefix_hits=_counter("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        kv_capacity=Capacity(
            name="vllm:cache_config_info", label_factors=("num_gpu_blocks", "block_size")
        ),
    ),
    Engine.SGLANG: EngineProfile(
        engine=Engine.SGLANG,
        running=_one("sglang:num_running_reqs", _SUM, **_SGLANG_TOTAL),
        waiting=_one("sglang:num_queue_reqs", _SUM, **_SGLANG_TOTAL),
        kv_usage=_one("sglang:token_usage", _MAX),
        # SGLang calls preemption "retraction". The counter exists from 0.5.7; before it only
        # the per-log-interval gauge ``num_retracted_reqs``, which has no rate.
        preemptions=_counter("sglang:num_retracted_requests_total"),
        # The gauge is SGLang's own tokens/s over its last decode log interval.
        decode_tokens=_one("sglang:gen_throughput", _SUM),
        # The tokenizer's counters: every prompt token, and those served from the radix cache.
        prefix_queries=_counter("sglang:prompt_tokens_total"),
        prefix_hits=_counter("sglang:cached_tokens_total"),
    ),
    Engine.TGI: EngineProfile(
        engine=Engine.TGI,
        running=_one("tgi_batch_current_size", _SUM),
        waiting=_one("tgi_queue_size", _SUM),
        # No KV gauge: the tokens the batch may grow to over the budget found at warmup
        # (``tgi_batch_max_total_tokens``, v3 backend, 2.3.1+) is the closest TGI gets.
        kv_usage=Signal(
            selectors=(Selector(name=_TGI_BATCH_TOKENS),),
            aggregation=_MAX,
            divisor=Selector(name="tgi_batch_max_total_tokens"),
        ),
        preemptions=None,
        # A histogram of tokens per finished request (no _total series): its _sum counts
        # tokens at completion.
        decode_tokens=_counter("tgi_request_generated_tokens_sum"),
        kv_capacity=Capacity(name="tgi_batch_max_total_tokens"),
    ),
    Engine.TRTLLM: EngineProfile(
        engine=Engine.TRTLLM,
        # The trtllm_ gauges exist from the 1.3 pre-releases, with return_perf_metrics (and
        # enable_iter_perf_stats on the PyTorch backend); 1.2.x exports none of them.
        running=_one("trtllm_num_requests_running", _SUM),
        waiting=_one("trtllm_num_requests_waiting", _SUM),
        kv_usage=_one("trtllm_kv_cache_utilization", _MAX),
        # No preemption counter, only the trtllm_num_paused_requests gauge.
        preemptions=None,
        decode_tokens=_counter("trtllm_generation_tokens_total"),
        metrics_path="/prometheus/metrics",
    ),
    Engine.TRITON_TRTLLM: EngineProfile(
        engine=Engine.TRITON_TRTLLM,
        running=_one("nv_trt_llm_request_metrics", _SUM, request_type="scheduled"),
        waiting=_one("nv_trt_llm_request_metrics", _SUM, request_type="waiting"),
        kv_usage=_one("nv_trt_llm_kv_cache_block_metrics", _MAX, kv_cache_block_type="fraction"),
        preemptions=None,
    ),
}


def profile_for(
    *, engine: Engine, custom: CustomMetrics | None = None, tgi_token_budget: int | None = None
) -> EngineProfile:
    """The profile of ``engine``.

    ``custom`` is required for :attr:`Engine.CUSTOM`. TGI's KV usage divides by the budget
    gauge TGI exports; ``tgi_token_budget`` (``--max-batch-total-tokens``) overrides it, e.g.
    for TGI before 2.3.1. Where neither is there, KV usage is ``None``, which the policy treats
    as "unknown" and balances on running/waiting alone.
    """
    if engine is Engine.CUSTOM:
        if custom is None:
            raise ValueError("engine custom needs metrics.custom with the metric names")
        return EngineProfile(
            engine=engine,
            running=_one(custom.running, _SUM),
            waiting=_one(custom.waiting, _SUM),
            kv_usage=None if custom.kv_usage is None else _one(custom.kv_usage, _MAX),
            preemptions=None if custom.preemptions is None else _counter(custom.preemptions),
        )
    profile = _PROFILES[engine]
    if engine is Engine.TGI and tgi_token_budget is not None:
        if tgi_token_budget <= 0:
            raise ValueError(f"tgi_token_budget must be positive, got {tgi_token_budget}")
        kv = Signal(
            selectors=(Selector(name=_TGI_BATCH_TOKENS),),
            aggregation=_MAX,
            scale=1.0 / tgi_token_budget,
        )
        return dataclasses.replace(profile, kv_usage=kv)
    return profile


def combine(
    *, signal: Signal, candidates: Sequence[Iterable[float]], divisor: Iterable[float] = ()
) -> float | None:
    """Fold the values found per selector (same order as ``signal.selectors``) into one number.

    The first selector with any value wins. Any unusable value (NaN, ±inf, negative) makes the
    result ``None``: a sum missing one model would understate load and look like headroom.
    ``divisor`` holds the values of ``signal.divisor`` on the same pod (ignored without one).
    """
    for found in candidates:
        values = list(found)
        if not values:
            continue
        if not all(math.isfinite(v) and v >= 0 for v in values):
            return None
        total = sum(values) if signal.aggregation is Aggregation.SUM else max(values)
        if signal.divisor is None:
            return _finite(total * signal.scale)
        budgets = list(divisor)
        if not budgets or not all(math.isfinite(b) and b > 0 for b in budgets):
            return None
        return _finite(total * signal.scale / max(budgets))
    return None


def _finite(value: float) -> float | None:
    # Huge finite series (1e308 on two models) overflow when summed: unknown, not infinite.
    return value if math.isfinite(value) else None


def evaluate(*, signal: Signal, series: Sequence[Series]) -> float | None:
    """:func:`combine` over one pod's parsed series."""
    by = signal.divisor
    return combine(
        signal=signal,
        candidates=[
            [s.value for s in series if sel.matches(name=s.name, labels=s.labels)]
            for sel in signal.selectors
        ],
        divisor=()
        if by is None
        else [s.value for s in series if by.matches(name=s.name, labels=s.labels)],
    )


def hit_rate(*, queries_per_s: float | None, hits_per_s: float | None) -> float | None:
    """Prefix-cache hits over queries in one window; ``None`` when nothing was queried."""
    if queries_per_s is None or hits_per_s is None or queries_per_s <= 0:
        return None
    # The two counters are read a moment apart, so the ratio may overshoot by a hair.
    return min(1.0, max(0.0, hits_per_s / queries_per_s))
