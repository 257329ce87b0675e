"""The Records the training step's time is computed from and returned in: the model's
shape, the links of each kind of parallelism, the GPU's rates, and the step.

Kept apart from :mod:`gpuplan.core.perf.step`, which is compiled and so holds no Struct
(docs/architecture.md, "The compiled core").
"""

from gpuplan.core.perf.efficiency import Generation, Kernels
from gpuplan.core.perf.kernels import KernelSource
from gpuplan.core.perf.link import Link
from gpuplan.core.record import Record


class StepShape(Record, kw_only=True):
    """What of the model and workload a step's time depends on."""

    batch_size: int
    """Micro-batch per data-parallel rank (sequences)."""

    seq: int
    accumulation: int
    """Micro-batches per optimizer step on each data-parallel rank."""

    checkpointing: str
    checkpoint_every: int = 1
    """With ``full`` or ``selective_op``: one layer in this many is checkpointed."""

    causal_skip: bool
    """A fused attention kernel: it skips the causal mask's blocks and keeps the scores
    on chip. False for eager attention and SDPA's math kernel
    (:func:`gpuplan.core.memory.kernels.materializes_scores`)."""

    frozen_base: bool
    """LoRA/QLoRA: no weight gradients for the base (4N a token instead of 6N)."""

    hidden_size: int
    mlp_width: int
    """Active MLP width per token (experts per token x expert width, plus a shared expert)."""

    kv_width: int
    """Key and value width per token (heads x head size), what context parallelism moves."""

    num_layers: int
    num_heads: int
    moe_layers: int
    experts_per_token: int
    experts: int = 0
    """Routed experts of an MoE layer (0: a dense model). With ``expert_width`` the
    routed experts' GEMMs are timed at their own shapes (:func:`expert_gemm_groups`)."""

    deduplicated_dispatch: bool = False
    """The expert dispatcher sends a token once per rank, and once per node across nodes,
    that holds any of its experts (``parallelism.expert_dispatcher``: ``deepep``,
    ``hybridep``), not once per routed expert (:func:`_expert_exchange_seconds`)."""

    expert_width: int = 0
    """One routed expert's MLP width (``moe_intermediate_size``)."""

    dense_mlp_width: int = 0
    """The MLP width of the layers that are not MoE layers (0: ``mlp_width``)."""

    expert_parameters: int = 0
    """Trained parameters of the routed experts, every MoE layer's (0: none, or frozen):
    expert parallelism holds ``1 / EP`` of them on a GPU and reduces their gradients over
    the data-parallel ranks that hold the same experts only."""

    adapters: tuple[tuple[int, int, int, bool], ...] = ()
    """LoRA: the adapted linears of one layer, ``(how many, in features, out features,
    row-parallel)``: tensor parallelism splits a row-parallel linear's input (attention
    output, MLP down) and the others' output, and their adapters' with them."""

    adapter_rank: int = 0
    adapter_dropout: bool = False
    """PEFT's ``lora_dropout`` above 0: a dropout on each adapted linear's input."""
    activation_bytes: int
    trainable_parameters: int
    parameters: int
    """All parameters: a ZeRO-3 gather moves frozen ones too (LoRA's base)."""

    gradient_bytes: int
    weight_bytes: int
    gather_bytes: int
    """Bytes per parameter a ZeRO-3 / FSDP all-gather moves: the weight bytes, or 1 when
    an fp8 job gathers its weights in fp8 (torchao float8 all-gather, Megatron's
    ``fp8_param_gather``)."""

    compile: bool
    autocast: bool = False
    """``amp_*`` precision: 16-bit matmuls under ``torch.autocast``, whose float32 ops
    (softmax, cross-entropy) run on upcast copies (``gpuplan.core.perf.step.AUTOCAST_SCORE_BYTES``)."""

    fused_kernels: bool = False
    """flash-attention's fused GPT kernels (``workload.fused_kernels``): the memory-bound
    traffic is counted from them (:mod:`gpuplan.core.perf.step`'s ``FUSED_NORM_BYTES``,
    ``FUSED_MLP_BYTES`` and ``FUSED_LOSS_BYTES_PER_LOGIT``)."""

    head_dim: int = 0
    """Size of one attention head; 0 where a measured attention table cannot time the
    attention (multi-head latent attention, an unknown model)."""

    vocab_size: int = 0
    """The output head's width (0: no head, or unknown); its GEMM is timed with the
    layers' from a measured kernel table."""

    vision: bool = False
    """A convolutional model: matmuls only, at the vision share of the GEMM efficiency."""

    flat_units: bool = False
    """FSDP1's flat parameters (``framework: fsdp1``): its root unit (embeddings, head)
    stays gathered from the forward through the backward, so it is all-gathered once a
    micro-batch; the others twice."""

    root_parameters: int = 0
    """FSDP1: the root unit's parameters."""

    backward_overlap: bool = True
    """False: FSDP1 without backward prefetch, whose backward all-gathers and
    reduce-scatters are not overlapped with compute."""

    reduce_once: bool = False
    """FSDP1 under ``no_sync()``: the micro-batches before the last keep their unsharded
    gradients, so gradients are reduce-scattered once a step, after the last."""

    adapter_units: int = 0
    """FSDP1 with adapters wrapped apart (PEFT's ``fsdp_auto_wrap_policy``): the FSDP
    units of one layer's adapters (a ``lora_A`` and a ``lora_B`` each), every one
    all-gathered forward and backward and reduce-scattered on its own."""

    reduced_parameters: int | None = None
    """Parameters whose gradients are reduced, where they differ from the trainable ones
    (FSDP1 adapters inside their layers' units reduce whole layers)."""

    flash2: bool = False
    """The attention runs FlashAttention-2's kernels (``workload.attention: flash``: the
    ``flash-attn`` 2.x package, or PyTorch SDPA's flash backend, which SDPA picks on
    Hopper before cuDNN's until torch 2.11): on Hopper they are timed at FlashAttention-2's
    measured rate (:mod:`gpuplan.core.perf.flash_attention`), not the measured prefill
    table's."""


class StepLinks(Record, kw_only=True):
    tensor: Link
    context: Link
    expert: Link
    pipeline: Link
    data: Link
    host: Link
    expert_local: int = 1
    """Ranks of a GPU's expert group in its scale-up domain, itself included: with
    ``expert`` the network, their shares of an all-to-all cross ``expert_local_link``
    at the same time (:func:`~gpuplan.core.perf.comm.all_to_all_seconds`)."""

    expert_local_link: Link | None = None
    """The link among those ranks (NVLink inside a node); None: ``expert``'s."""


class Rates(Record, kw_only=True):
    """What one GPU delivers for this job."""

    peak_flops: float
    """Dense peak of the precision the matmuls run in."""

    attention_peak_flops: float
    """The peak attention runs at: the matmul peak, or the 16-bit one in an fp8 job."""

    bandwidth_bytes_per_s: float
    fp8: bool = False
    """The matmuls run on the fp8 path."""

    generation: Generation
    kernels: Kernels
    vision_factor: float = 1.0
    mfu: float | None = None
    """A request's ``efficiency.mfu``: model FLOPs run at ``peak · mfu``, replacing the
    kernel model (recompute, communication and the bubble are still added)."""

    kernel_table: str | None = None
    """Catalog id of the measured kernel table that times this GPU's GEMMs and attention
    (:mod:`gpuplan.core.perf.kernels`); None: the roofline-and-efficiency model."""

    measured_peak: bool = False
    """``peak_flops`` is the live fleet's measured matmul rate (the agent's benchmark, a
    kernel timed alone at its best shape), not the datasheet's: its GEMMs reach
    ``kernels.measured_kernel_share`` of it, as of a measured card's or table's rate,
    not the generation's plateau, which is a share of the datasheet peak."""

    @property
    def kernel_source(self) -> KernelSource:
        return "measured" if self.kernel_table is not None and self.mfu is None else "roofline"


class Step(Record, kw_only=True):
    """One optimizer step on every rank."""

    seconds: float
    tokens: int
    """Tokens the step trains on across the whole job."""

    compute_s: float
    """Model FLOPs (matmuls, attention), memory-bound kernels and launches."""

    recompute_s: float
    exposed_comm_s: float
    """Communication left on the critical path, every kind together."""

    bubble_s: float
    optimizer_s: float
    forward_s: float = 0.0
    """A forward pass over the step's tokens on every rank, as an evaluation runs it: each
    micro-batch's forward and the forward's exposed model-parallel traffic (two of the
    tensor collectives, half the context, expert and pipeline exchanges), and the
    pipeline's fill, a forward-only schedule's (p - 1) / v slots. No backward,
    recomputation, gradient traffic or optimizer step; a sharded data-parallel gather
    hides behind the forward as in training."""

    model_flops_per_token: float
    mfu: float
    """Model FLOPs of the step / (seconds x GPUs x matmul peak)."""

    kernel_source: KernelSource = "roofline"
    """What timed the GEMMs and attention (:attr:`MicroBatch.measured`)."""

    kernel_table: str | None = None
    """The measured table's provenance id, with ``kernel_source: measured``."""
