"""Inference: the prefill that fills the KV cache, and the cache kept for generation.

The semantics are those of a Hugging Face ``forward(use_cache=True, logits_to_keep=1)``
over ``batch_size`` prompts of ``sequence_length`` tokens: no autograd, so a layer's
temporaries die with it, while every layer's keys and values stay in the cache. Room
for ``max_new_tokens`` more tokens per sequence is counted as a serving engine would
reserve it.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.dims import Dims
from gpuplan.core.memory.layers_records import LayerCost
from gpuplan.core.memory.numerics import FP32
from gpuplan.core.memory.peak import Peak


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


def mask_bytes(arch: Architecture, matmul_bytes: int, *, eager: bool, cpu: bool) -> float:
    """Bytes per (query, key) pair of the attention mask the prefill materializes once.

    Eager attention adds a mask of the activation dtype to the scores. With SDPA,
    Hugging Face passes ``is_causal`` and no mask, except Falcon, which always builds a
    boolean mask; the math path its multi-query attention takes (see layers._core)
    converts it to the scores' dtype (fp32 on the CPU's upcast path).
    """
    if eager:
        return float(matmul_bytes)
    if arch.family == "falcon":
        math_dtype = 4 if cpu else matmul_bytes
        return 1.0 + (math_dtype if arch.num_kv_heads < arch.num_heads else 0.0)
    return 0.0


def inference_peak(
    arch: Architecture,
    d: Dims,
    layer: LayerCost,
    *,
    local_layers: int,
    kv_per_token: float,
    max_new_tokens: int,
    matmul_bytes: int,
    mask_bytes: float,
    tuple_per_step: bool = False,
) -> Peak:
    width = arch.num_labels if arch.classifier else arch.vocab_size
    window = arch.sliding_window
    full = d.seq + max_new_tokens
    final = full if not window else min(full, window)
    # Layers that attend globally keep the whole sequence even beside sliding ones.
    global_layers = min(arch.global_layers, local_layers) if window else 0
    kv_final = (
        kv_per_token * d.batch * (final * (local_layers - global_layers) + full * global_layers)
    )
    # The layer's own temporaries around its input, the materialized causal mask eager
    # attention adds (one for all layers), and the last position's logits.
    mask = mask_bytes * d.batch * d.seq * d.seq
    # A serving engine reserves the cache of the tokens still to come before the
    # prefill runs (vLLM's blocks, a static cache): the prefill sees the final size.
    # The logits the prefill returns: the last position's, or (tuple_per_step, before
    # transformers had logits_to_keep) every position's, upcast to fp32.
    positions = d.tokens if tuple_per_step else d.batch
    logits = (matmul_bytes + FP32) * positions * width
    kv_prompt = kv_per_token * min(d.seq, window or d.seq) * d.batch * local_layers
    prefill = Peak(
        gradients=0.0,
        # Only k and v: Hugging Face's DynamicCache (transformers 5) concatenates them onto
        # an empty tensor, a copy, so a fused projection's output (GPT-2's c_attn) dies
        # with its layer rather than living on as the storage of cached views.
        # tuple_per_step allocates only the prompt's cache here; it grows later.
        kv_cache=kv_prompt if tuple_per_step else kv_final,
        # The layer input, and the embedding output the model's forward still holds.
        activations=layer.input + matmul_bytes * d.hidden_full,
        temporary=layer.forward_peak + mask + logits,
        phase="prefill",
    )
    if max_new_tokens == 0 or (tuple_per_step and max_new_tokens == 1):
        return prefill  # generate's prefill yields the first new token itself
    if tuple_per_step:
        # Each step returns a new tuple (every layer concatenated one token longer) while
        # the loop holds the previous step's: at the end of the last step both caches are
        # alive; at the end of the first, the prefill's outputs (their logits) still are.
        step = kv_per_token * d.batch * local_layers
        last = Peak(
            gradients=0.0,
            kv_cache=kv_final,
            activations=2.0 * matmul_bytes * d.batch * arch.hidden_size,
            temporary=kv_final - step + FP32 * d.batch * width,
            phase="decode (previous cache held)",
        )
        first = Peak(
            gradients=0.0,
            kv_cache=kv_prompt + step,
            activations=2.0 * matmul_bytes * d.batch * arch.hidden_size,
            temporary=kv_prompt + FP32 * positions * width,
            phase="decode (prefill outputs held)",
        )
        return max(prefill, first, last, key=Peak.alive)
    # Generation appends to each layer's cache by concatenation: one layer's cache is
    # briefly held twice.
    one_layer = kv_final / max(local_layers, 1)
    decode = Peak(
        gradients=0.0,
        kv_cache=kv_final,
        activations=2.0 * matmul_bytes * d.batch * arch.hidden_size,
        temporary=one_layer + (matmul_bytes + FP32) * d.batch * width,
        phase="decode (cache full)",
    )
    return max(prefill, decode, key=Peak.alive)
