"""Declared workload mixes: request classes with length distributions and bursty arrivals.

A mix is a list of classes, each with a share of the requests and lognormal prompt and output
lengths (median and log-space sigma, clipped to a range). Arrivals form a gamma renewal process
whose inter-arrival coefficient of variation is stated (1 = Poisson, above 1 = bursty).
:func:`classic_mix` is the reference mix of the design: classifications, summaries, agents.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trimtab_lab.sim.workloads.base import IntArray, Workload

__all__ = [
    "Lengths",
    "RequestClass",
    "classic_mix",
    "draw_lengths",
    "draw_requests",
    "generate_mix",
]


@dataclass(frozen=True, kw_only=True)
class Lengths:
    """A lognormal token-length distribution, clipped to ``[minimum, maximum]``."""

    median: float
    """Median length in tokens, > 0."""
    sigma: float = 0.0
    """Standard deviation of the log length; 0 gives the median every time."""
    minimum: int = 1
    maximum: int = 1_000_000

    def __post_init__(self) -> None:
        if not self.median > 0 or self.sigma < 0 or not 1 <= self.minimum <= self.maximum:
            raise ValueError("need median > 0, sigma >= 0 and 1 <= minimum <= maximum")


@dataclass(frozen=True, kw_only=True)
class RequestClass:
    """One kind of request in a mix."""

    name: str
    share: float
    """Relative frequency; shares are normalised over the mix."""
    prompt: Lengths
    output: Lengths


def classic_mix() -> tuple[RequestClass, ...]:
    """Yes/no classifications, document summaries and agent traces (the design's mix).

    Half the requests are 5-token answers, which round-robin treats like the 10,000-token agent
    steps that hold a batch slot and ~16k tokens of KV for minutes.
    """
    return (
        RequestClass(
            name="classify",
            share=0.55,
            prompt=Lengths(median=600, sigma=0.6, maximum=4000),
            output=Lengths(median=5, sigma=0.2, maximum=16),
        ),
        RequestClass(
            name="summarize",
            share=0.35,
            prompt=Lengths(median=3000, sigma=0.5, maximum=16000),
            output=Lengths(median=2000, sigma=0.25, maximum=4000),
        ),
        RequestClass(
            name="agent",
            share=0.10,
            prompt=Lengths(median=6000, sigma=0.5, maximum=24000),
            output=Lengths(median=10000, sigma=0.2, maximum=16000),
        ),
    )


def draw_lengths(*, lengths: Lengths, count: int, rng: np.random.Generator) -> IntArray:
    """``count`` lengths drawn from ``lengths``."""
    raw = lengths.median * np.exp(lengths.sigma * rng.standard_normal(count))
    return np.clip(np.rint(raw), lengths.minimum, lengths.maximum).astype(np.int64)


def draw_requests(
    *, classes: Sequence[RequestClass], count: int, rng: np.random.Generator
) -> tuple[IntArray, IntArray]:
    """Prompt and output lengths of ``count`` requests drawn from the mix."""
    if not classes:
        raise ValueError("a mix needs at least one class")
    shares = np.array([c.share for c in classes], dtype=np.float64)
    if np.any(shares < 0) or shares.sum() <= 0:
        raise ValueError("class shares must be >= 0 and not all 0")
    which = rng.choice(len(classes), size=count, p=shares / shares.sum())
    prompt = np.empty(count, dtype=np.int64)
    output = np.empty(count, dtype=np.int64)
    for index, request_class in enumerate(classes):
        mask = which == index
        n = int(mask.sum())
        prompt[mask] = draw_lengths(lengths=request_class.prompt, count=n, rng=rng)
        output[mask] = draw_lengths(lengths=request_class.output, count=n, rng=rng)
    return prompt, output


def generate_mix(
    *,
    classes: Sequence[RequestClass],
    rate_per_s: float,
    duration_s: float,
    cv: float,
    seed: int,
) -> Workload:
    """Requests of the mix arriving over ``[0, duration_s)`` at ``rate_per_s`` on average.

    Inter-arrival gaps are gamma distributed with coefficient of variation ``cv`` (shape
    ``1/cv**2``), so ``cv=1`` is a Poisson process and larger values come in bursts.
    """
    if not rate_per_s > 0 or not duration_s > 0 or not cv > 0:
        raise ValueError("rate_per_s, duration_s and cv must be > 0")
    rng = np.random.default_rng(seed)
    shape = 1.0 / (cv * cv)
    gaps: list[np.ndarray] = []
    total = 0.0
    batch = int(rate_per_s * duration_s * 1.1) + 64
    while total < duration_s:
        drawn = rng.gamma(shape, 1.0 / (shape * rate_per_s), size=batch)
        gaps.append(drawn)
        total += float(drawn.sum())
    arrival = np.cumsum(np.concatenate(gaps))
    arrival = arrival[arrival < duration_s]
    prompt, output = draw_requests(classes=classes, count=len(arrival), rng=rng)
    names = "+".join(c.name for c in classes)
    return Workload(
        arrival_s=arrival.astype(np.float64),
        prompt_tokens=prompt,
        output_tokens=output,
        source=f"mix {names} at {rate_per_s:.3g}/s cv {cv:g}",
    )
