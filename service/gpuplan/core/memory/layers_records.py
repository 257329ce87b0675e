"""What one layer's activation count reads (which weights train, how the step runs) and
returns (the bytes it keeps and adds).

Kept apart from :mod:`gpuplan.core.memory.layers`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

import msgspec

from gpuplan.core.memory.numerics import FP32
from gpuplan.core.record import Record


class Trainable(Record, kw_only=True):
    """Which weights train: all of them, or LoRA adapters on some linears."""

    full: bool = True
    lora_rank: int = 0
    adapted: frozenset[str] = frozenset()
    """Hugging Face names of the linears with adapters (q_proj, v_proj, gate_proj, ...)."""

    upcast: bool = False
    """PEFT runs fp32 adapters on a half-precision base: each adapted linear casts its
    input to fp32 (``x.to(lora_A.weight.dtype)``), and ``lora_A`` keeps that copy."""

    recast: bool = False
    """With ``upcast``, autocast casts each adapter's fp32 copy back to the compute dtype
    inside ``lora_A`` (its weight is the low-precision one there), so ``lora_A`` keeps a
    low-precision copy of its own and outputs the compute dtype. FSDP1's mixed precision
    with the adapters wrapped in their own units: PEFT reads ``lora_A.weight.dtype``
    (peft 0.21.2, tuners/lora/layer.py ``Linear.forward``: ``x =
    self._cast_input_dtype(x, lora_A.weight.dtype)``) outside the adapter's unit, where
    the weight is its fp32 flat parameter's; the unit's forward gathers it in
    ``param_dtype``, and autocast casts the fp32 input to it."""

    dropout: bool = False
    """``lora_dropout`` > 0: each adapter drops its input before ``lora_A``."""

    base_grads: bool = False
    """The frozen base's weights get gradients all the same (FSDP1 adapters sharing
    their layer's flat parameter, whose every view requires grad): each linear keeps its
    input and each norm its normalized tensor, as in full training."""

    @property
    def weights_grad(self) -> bool:
        """Do the layer's own weights (linears, norms) get gradients?"""
        return self.full or self.base_grads

    def saves(self, *modules: str) -> bool:
        """Does autograd keep the input of these linears (trainable, or adapted)?"""
        return self.weights_grad or any(m in self.adapted for m in modules)

    def adapters(self, *modules: str) -> int:
        return 0 if self.full else sum(1 for m in modules if m in self.adapted)

    def copy_bytes(self, matmul: float) -> float:
        """Bytes per element of the input copy each upcast adapter keeps (and of its
        ``lora_A`` output): fp32, or the compute dtype where autocast recasts it."""
        return matmul if self.recast else FP32


class Step(Record, kw_only=True):
    """How the step runs, as far as one layer is concerned."""

    eager: bool
    """Materialized attention scores (``attention: eager``)."""

    training: bool
    selective: bool = False
    """Selective recomputation (Korthikanti et al.): the attention core's s x s tensors
    are recomputed in the backward instead of kept."""

    trainable: Trainable = msgspec.field(default_factory=Trainable)
    compiled: bool = False
    """``torch.compile``: fused elementwise ops keep only what a fused backward needs."""

    fused_norms: bool = False
    """Each norm is one fused kernel (Megatron-core's Transformer Engine or Apex norms):
    it keeps its input and one fp32 statistic per token, and its output is the next
    linear's saved input; no fp32 copies as in the eager Hugging Face RMSNorm."""

    fused_activation: bool = False
    """The MLP's activation is one fused kernel (Megatron-core's bias-SwiGLU and
    bias-GELU fusions, on unless ``--no-bias-swiglu-fusion``/``--no-bias-gelu-fusion``;
    megatron/core/fusions/fused_bias_swiglu.py saves only its input): it keeps the first
    linear's output, and its own output is the second linear's saved input."""

    fused_gpt: bool = False
    """flash-attention's training GPT (``workload.fused_kernels``): fused dropout-add-
    LayerNorm, fused dense and fused MLP kernels, FlashAttention on the packed qkv (see
    :func:`_fused_gpt_halves`)."""

    activation_input_bytes: float = 0.0
    """Bytes per element the fused activation keeps of its input: 1 with Megatron's
    ``activation_func_fp8_input_store``; 0, the matmul dtype's."""

    fused_qkv: bool = False
    """Megatron-core's one ``linear_qkv`` and one ``linear_fc1`` (gate and up): an adapter
    on q, k or v is one adapter on the fused projection, and one on gate or up one on
    ``linear_fc1``, as NeMo's LoRA targets them (``target_modules: ['attention']`` adapts
    ``linear_qkv`` and ``linear_proj``: NeMo, nemo/collections/llm/peft/lora.py)."""

    sharded_linear_inputs: bool = False
    """Megatron's sequence parallelism: a column-parallel linear keeps its own sequence
    shard of the input and all-gathers it again in the backward (NVIDIA/Megatron-LM
    megatron/core/tensor_parallel/layers.py: ``ctx.save_for_backward(input, weight)``,
    then the all-gather into a reused buffer), so no gathered input is kept."""


class LayerCost(Record, kw_only=True):
    saved: float
    """Bytes kept for backward until this layer's backward runs."""

    mlp_saved: float
    """The part of ``saved`` the MLP half of the backward frees (it runs first)."""

    mlp_backward: float
    """Peak bytes the MLP half of the backward adds above ``saved``."""

    attention_backward: float
    """Peak bytes the attention half adds above what is left by then."""

    forward_peak: float
    """Peak bytes of a forward without autograd (inference, recompute), above the layer
    input and the KV cache."""

    input: float
    """The layer input: what full activation checkpointing keeps per layer."""

    op_saved: float = 0.0
    """What torchtitan's operator-level selective checkpointing keeps (``selective_op``):
    the layer input and the outputs of attention and of every other matmul."""
