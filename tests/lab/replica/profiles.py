"""A replica small enough to reason about by hand: 64 KV blocks of 4 tokens, 8 sequences."""

from __future__ import annotations

from trimtab_lab.replica import ReplicaProfile

TINY = ReplicaProfile(
    name="tiny",
    num_gpu_blocks=64,
    block_size=4,
    max_num_seqs=8,
    max_num_batched_tokens=32,
    max_model_len=200,
    watermark=0.0,
    step_base_s=0.01,
    step_per_seq_s=0.001,
    step_per_kv_token_s=1e-5,
    step_per_prefill_token_s=1e-4,
)
