"""The KV cache of multi-head latent attention (DeepSeek-V2/V3) as serving engines keep it.

Hugging Face's DeepSeek-V3 caches every head's decompressed keys and values (what the
memory estimator counts, ``memory/inference.py``). The serving engines cache the latent
instead: per layer and token one vector of ``kv_lora_rank + qk_rope_head_dim`` values,
shared by all heads (SGLang ``python/sglang/srt/mem_cache/memory_pool.py``
``MLATokenToKVPool`` at 14c3feee, a buffer of ``[size, 1, kv_lora_rank +
qk_rope_head_dim]`` per layer; vLLM's ``ModelConfig.get_head_size`` answers the same width
with one KV head for MLA models). One KV head cannot be split by tensor parallelism, so
every rank of a tensor-parallel group holds the whole latent of each of its sequences;
data-parallel attention ranks hold only their own sequences'.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.schema import Workload


def kv_dtype_bytes(w: Workload) -> int:
    """Bytes of one cached value: ``workload.kv_cache_dtype``, else the activations'
    (bf16, or fp32 for an fp32 model), as the estimator and the engines' ``auto`` take it."""
    dtype = w.kv_cache_dtype
    if dtype == "auto":
        dtype = "fp32" if w.precision == "fp32" else "bf16"
    return {"fp8": 1, "fp32": 4}.get(dtype, 2)


def latent_kv_bytes_per_token(arch: Architecture | None, w: Workload) -> float | None:
    """KV cache bytes per token of one sequence on each GPU that holds it, all layers;
    None for a model without latent attention."""
    if arch is None or arch.mla is None:
        return None
    m = arch.mla
    return float(arch.num_layers * (m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes(w))
