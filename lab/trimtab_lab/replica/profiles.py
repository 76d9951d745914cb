"""Named hardware/model profiles for the replica model, calibrated to published numbers.

A profile fixes what one serving replica can hold (KV blocks, batch limits) and how long one
engine iteration takes. The step-time model is a memory-bandwidth roofline: every iteration
reads the weights once (``step_base_s``), pays a little per sequence (sampling, scheduling,
MLP compute that grows with the batch), reads the KV cache of every scheduled sequence
(``step_per_kv_token_s``) and computes the prefill tokens (``step_per_prefill_token_s``).
``docs/simulator.md`` lists the sources and the arithmetic behind each figure.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PROFILE_NAMES", "ReplicaProfile", "get_profile"]


@dataclass(frozen=True, kw_only=True)
class ReplicaProfile:
    """What one replica (one engine on its GPU(s)) can hold and how fast it iterates."""

    name: str
    """Registry name, e.g. ``"llama3-8b-h100"``."""
    num_gpu_blocks: int
    """KV-cache blocks on the GPU (vLLM ``cache_config_info{num_gpu_blocks}``)."""
    block_size: int
    """Tokens per KV block (vLLM default 16)."""
    max_num_seqs: int
    """Most requests in the running batch (vLLM ``--max-num-seqs``, default 256)."""
    max_num_batched_tokens: int
    """Token budget of one iteration, prefill chunks included (``--max-num-batched-tokens``)."""
    max_model_len: int
    """Longest prompt + output a request may have; longer ones are refused (HTTP 400)."""
    watermark: float
    """Share of KV blocks a new request must leave free when it is admitted (0..1)."""
    step_base_s: float
    """Seconds of one iteration with an empty batch: weight reads plus launch overhead."""
    step_per_seq_s: float
    """Extra seconds per sequence in the iteration."""
    step_per_kv_token_s: float
    """Extra seconds per token of KV cache read by the scheduled sequences."""
    step_per_prefill_token_s: float
    """Extra seconds per prompt token computed in the iteration (compute bound)."""

    def __post_init__(self) -> None:
        for field_name in ("num_gpu_blocks", "block_size", "max_num_seqs", "max_model_len"):
            if getattr(self, field_name) < 1:
                raise ValueError(f"profile {self.name}: {field_name} must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # A decode step gives every running sequence one token; the budget must cover it.
            raise ValueError(f"profile {self.name}: max_num_batched_tokens must be >= max_num_seqs")
        if not 0.0 <= self.watermark < 1.0:
            raise ValueError(f"profile {self.name}: watermark must be in [0, 1)")
        if self.step_base_s <= 0.0:
            raise ValueError(f"profile {self.name}: step_base_s must be > 0")

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the KV cache holds when every block is full."""
        return self.num_gpu_blocks * self.block_size

    def step_time_s(self, *, seqs: int, kv_tokens: int, prefill_tokens: int) -> float:
        """Seconds of one iteration at full speed (divide by a replica's speed multiplier)."""
        return (
            self.step_base_s
            + self.step_per_seq_s * seqs
            + self.step_per_kv_token_s * kv_tokens
            + self.step_per_prefill_token_s * prefill_tokens
        )


# Llama-3-8B, bf16, one H100 SXM 80 GB, vLLM V1 defaults (gpu_memory_utilization 0.9).
# KV per token: 32 layers x 8 KV heads x 128 dims x 2 (K,V) x 2 bytes = 128 KiB.
# Free memory for KV ~ 72 GB - 16 GB weights - ~5 GB activations ~ 51 GB -> ~400k tokens,
# i.e. ~25,000 blocks of 16 (vLLM logs "# GPU blocks: 2xxxx" for this setup).
# Decode reads 16 GB of weights at ~3.35 TB/s -> ~5 ms, plus overhead -> ~6 ms ITL at batch 1;
# a full batch reading ~400k KV tokens (~51 GB) adds ~6 ms at the ~60 % attention-bandwidth
# efficiency seen in practice, which with per-sequence cost lands ITL at ~15 ms for 256 seqs.
# Prefill: 2 x 8e9 FLOP per token at ~600 TFLOP/s effective -> ~27 us/token; 30 us is used so
# a 1,000-token prompt has a ~36 ms TTFT, as vLLM benchmarks on H100 report (30-50 ms).
_LLAMA3_8B_H100 = ReplicaProfile(
    name="llama3-8b-h100",
    num_gpu_blocks=25_000,
    block_size=16,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    max_model_len=131_072,
    watermark=0.01,
    step_base_s=6.0e-3,
    step_per_seq_s=15e-6,
    step_per_kv_token_s=15e-9,
    step_per_prefill_token_s=30e-6,
)

# Llama-3-8B, bf16, one A10G 24 GB (AWS g5): 24 GB x 0.9 - 16 GB weights - ~1 GB activations
# leaves ~5 GB, i.e. ~40k tokens or 2,500 blocks of 16, so max_model_len must drop to 32k.
# 600 GB/s HBM: weights alone take ~27 ms per iteration; full KV (~5 GB) adds ~9 ms.
# ~70 TFLOP/s dense bf16 at ~55 % MFU gives ~0.4 ms per prefill token, i.e. a ~430 ms TTFT
# for a 1,000-token prompt (vLLM reports 350-450 ms on A10G). vLLM's default token budget for
# GPUs under 70 GB is 2,048.
_LLAMA3_8B_A10G = ReplicaProfile(
    name="llama3-8b-a10g",
    num_gpu_blocks=2_500,
    block_size=16,
    max_num_seqs=256,
    max_num_batched_tokens=2048,
    max_model_len=32_768,
    watermark=0.01,
    step_base_s=28e-3,
    step_per_seq_s=40e-6,
    step_per_kv_token_s=220e-9,
    step_per_prefill_token_s=400e-6,
)

_PROFILES = {profile.name: profile for profile in (_LLAMA3_8B_H100, _LLAMA3_8B_A10G)}

PROFILE_NAMES: tuple[str, ...] = tuple(sorted(_PROFILES))
"""Every registered profile name."""


def get_profile(name: str) -> ReplicaProfile:
    """The registered profile called ``name``; ``KeyError`` names the known ones."""
    try:
        return _PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILE_NAMES)
        raise KeyError(f"unknown replica profile {name!r}; known: {known}") from None
