"""Which attention kernel a step runs: one answer for the memory estimate and the speed model.

The kernel decides two things. Memory: whether a layer keeps its s×s attention weights
for the backward. Speed: whether attention computes every score, causal mask or not,
and moves the scores through memory. Eager attention does both. So does SDPA when no
fused kernel (flash, memory-efficient) takes the call and PyTorch runs its math kernel.
Both models read this module, so they cannot disagree about which kernel runs.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.numerics import FP32, Numerics, numerics_for
from gpuplan.core.memory.schema import Workload


def keeps_attention_weights(arch: Architecture, w: Workload, num: Numerics) -> bool:
    """Whether a layer's attention keeps its s×s weights for the backward.

    Eager attention does. So does ``sdpa`` when a training step on CUDA calls it in fp32
    with grouped key/value heads (Hugging Face passes ``enable_gqa`` for an unpadded
    batch): flash attention computes in 16 bits only, and the memory-efficient kernel
    did not take grouped heads in torch 2.11, so PyTorch ran its math kernel. On an
    H200 a Llama of 16 query and 4 key/value heads in fp32 allocated 8,573,155,328 B
    (bench/results/trace_cuda.json, ``llama_medium_fp32``); with the weights kept the
    estimate is 0.6% below that, without them 28%. In bf16 the same model ran flash
    attention and kept none. The CPU kernels take fp32 grouped heads.
    """
    if w.attention == "eager":
        return True
    return (
        w.attention == "sdpa"
        and w.mode != "inference"
        and not num.cpu
        and num.matmul == FP32
        and arch.num_kv_heads < arch.num_heads
    )


def unrepeated_multi_query(arch: Architecture, *, heads: int, kv_heads: int) -> bool:
    """Falcon's multi-query attention hands SDPA one key/value head for all ``heads``
    query heads without ``enable_gqa``. The fused kernels need equal head counts, so
    SDPA runs its math kernel there on every device."""
    return arch.family == "falcon" and kv_heads < heads


def materializes_scores(arch: Architecture | None, w: Workload) -> bool:
    """Whether attention on a GPU computes and stores every s×s score.

    Eager attention and SDPA's math kernel do: they multiply the whole query-key
    product and mask it afterwards, so a causal mask saves them no work, and the scores
    travel through memory. The fused kernels skip the masked blocks and keep the scores
    in on-chip memory. Without an architecture only the request's ``attention`` says.
    """
    if w.attention == "eager":
        return True
    if arch is None:
        return False
    gpu = numerics_for(w.precision, "cuda")
    return keeps_attention_weights(arch, w, gpu) or unrepeated_multi_query(
        arch, heads=arch.num_heads, kv_heads=arch.num_kv_heads
    )
