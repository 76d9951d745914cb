"""Fleet capacity and utilisation: how much of a fleet a workload's arrival rate uses.

Utilisation is ``rate / max_rate``, where ``max_rate`` sums, over replicas, the request rate a
replica sustains at its reference batch: the largest decode batch that both ``max_num_seqs``
and a ``KV_FILL`` share of its KV cache allow, given the workload's token-weighted mean KV
footprint per decoding sequence. A request costs its output tokens at that batch's per-token
time plus its prompt tokens at the prefill rate. ``docs/simulator.md`` derives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trimtab_lab.replica import ReplicaProfile
from trimtab_lab.sim.workloads.base import IntArray

__all__ = ["KV_FILL", "ReplicaSpec", "kv_footprint", "max_request_rate", "reference_batch"]

KV_FILL = 0.9
"""Share of the KV cache the reference batch may fill; the rest absorbs length variance."""


@dataclass(frozen=True, kw_only=True)
class ReplicaSpec:
    """A replica as the capacity model sees it."""

    profile: ReplicaProfile
    speed: float = 1.0


def kv_footprint(*, prompt_tokens: IntArray, output_tokens: IntArray) -> float:
    """Mean KV tokens of a decoding sequence, weighted by the iterations it decodes for.

    A request decodes ``o`` iterations holding on average ``p + o/2`` tokens.
    """
    prompt = prompt_tokens.astype(np.float64)
    output = output_tokens.astype(np.float64)
    return float(np.sum(output * (prompt + output / 2)) / np.sum(output))


def reference_batch(*, profile: ReplicaProfile, footprint: float) -> int:
    """The decode batch a replica sustains: KV-bound or ``max_num_seqs``-bound."""
    by_kv = int(KV_FILL * profile.kv_capacity_tokens / max(footprint, 1.0))
    return max(1, min(profile.max_num_seqs, by_kv))


def max_request_rate(
    *, replicas: Sequence[ReplicaSpec], prompt_tokens: IntArray, output_tokens: IntArray
) -> float:
    """Requests per second the fleet sustains for this request-size mix (utilisation 1)."""
    if len(prompt_tokens) == 0:
        raise ValueError("no requests to size the fleet against")
    footprint = kv_footprint(prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    mean_prompt = float(np.mean(prompt_tokens))
    mean_output = float(np.mean(output_tokens))
    rate = 0.0
    for replica in replicas:
        p = replica.profile
        batch = reference_batch(profile=p, footprint=footprint)
        step = p.step_time_s(seqs=batch, kv_tokens=round(batch * footprint), prefill_tokens=0)
        seconds_per_output = step / batch
        work = mean_output * seconds_per_output + mean_prompt * p.step_per_prefill_token_s
        rate += replica.speed / work
    return rate
