"""Inference: the prefill that fills the KV cache, and the cache kept for generation.

The semantics are those of a Hugging Face ``forward(use_cache=True, logits_to_keep=1)``
over ``batch_size`` prompts of ``sequence_length`` tokens: no autograd, so a layer's
temporaries die with it, while every layer's keys and values stay in the cache. Room
for ``max_new_tokens`` more tokens per sequence is counted as a serving engine would
reserve it.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.dims import Dims
from gpuplan.core.memory.layers import LayerCost
from gpuplan.core.record import Record

FP32 = 4
KV_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


class InferencePeak(Record, kw_only=True):
    kv_cache: float
    activations: float
    temporary: float
    phase: str


def kv_bytes_per_token(arch: Architecture, kv_dtype_bytes: float, tp: int = 1) -> float:
    """Cache bytes per token per layer: keys and values of this GPU's KV heads.

    Hugging Face's DeepSeek-V3 caches the decompressed keys and values, not the latent.
    """
    if arch.mla is not None:
        m = arch.mla
        return (
            arch.num_heads
            / tp
            * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
            * kv_dtype_bytes
        )
    return 2 * max(arch.num_kv_heads // tp, 1) * arch.head_dim * kv_dtype_bytes


def prefill_retained_per_token(arch: Architecture, matmul_bytes: int, tp: int = 1) -> float:
    """Bytes per token per layer the prefill's cache holds beyond k and v themselves.

    Hugging Face's cache stores the tensors it is handed. Where the projection is
    fused (GPT-2's c_attn, GPT-NeoX's and Falcon's query_key_value, Phi-3's qkv_proj),
    v (and for GPT-2 k) are views of the fused output, so the whole output stays alive
    until the first generated token replaces them with concatenated copies.
    """
    q = arch.num_heads // tp * arch.head_dim
    k = max(arch.num_kv_heads // tp, 1) * arch.head_dim
    if arch.family == "gpt2":
        return matmul_bytes * q  # c_attn's q third
    if arch.family in ("neox", "falcon") or arch.model_type == "phi3":
        return matmul_bytes * (q + k)  # the fused output (q, k, v) beside the rotated k
    return 0.0


def inference_peak(
    arch: Architecture,
    d: Dims,
    layer: LayerCost,
    *,
    local_layers: int,
    kv_per_token: float,
    retained_per_token: float,
    max_new_tokens: int,
    matmul_bytes: int,
    eager: bool,
) -> InferencePeak:
    window = arch.sliding_window
    prompt = d.seq if not window else min(d.seq, window)
    final = d.seq + max_new_tokens if not window else min(d.seq + max_new_tokens, window)
    kv_prefill = kv_per_token * prompt * d.batch * local_layers
    kv_final = kv_per_token * final * d.batch * local_layers
    # The layer's own temporaries around its input, the materialized causal mask eager
    # attention adds (one for all layers), and the last position's logits.
    mask = matmul_bytes * d.batch * d.seq * d.seq if eager else 0.0
    prefill = InferencePeak(
        kv_cache=kv_prefill + retained_per_token * prompt * d.batch * local_layers,
        # The layer input, and the embedding output the model's forward still holds.
        activations=layer.input + matmul_bytes * d.hidden_full,
        temporary=layer.forward_peak + mask + (matmul_bytes + FP32) * d.batch * arch.vocab_size,
        phase="prefill",
    )
    if max_new_tokens == 0:
        return prefill
    # Generation appends to each layer's cache by concatenation: one layer's cache is
    # briefly held twice.
    one_layer = kv_final / max(local_layers, 1)
    decode = InferencePeak(
        kv_cache=kv_final,
        activations=2.0 * matmul_bytes * d.batch * arch.hidden_size,
        temporary=one_layer + (matmul_bytes + FP32) * d.batch * arch.vocab_size,
        phase="decode (cache full)",
    )
    return max(prefill, decode, key=lambda p: p.kv_cache + p.activations + p.temporary)
