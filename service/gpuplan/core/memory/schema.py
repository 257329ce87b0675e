"""The estimate's request and response: the schema of the API, the CLI and plan files.

Bounds are part of the schema: a batch of 10^18 or a sequence of 10^12 tokens is not
a job anyone runs, and refusing it at the door (422, naming the field) is what keeps
every later multiplication finite and every request fast.
"""

from typing import Annotated, Any, Literal

import msgspec

from gpuplan.core.record import Record

Mode = Literal["training", "finetune_lora", "finetune_qlora", "inference"]
Precision = Literal["fp32", "fp16", "bf16", "amp_fp16", "amp_bf16", "fp8"]
Optimizer = Literal[
    "adamw", "adam", "sgd", "sgd_momentum", "adafactor", "adamw_8bit", "lion", "none"
]
Checkpointing = Literal["none", "full", "selective", "selective_op"]
Framework = Literal["ddp", "fsdp1", "fsdp2", "deepspeed", "megatron"]
GradientReduceDtype = Literal["fp32", "bf16", "fp16"]
ParameterInit = Literal["meta", "materialized"]
Attention = Literal["eager", "sdpa", "flash"]
Quantization = Literal["none", "int8", "int4", "nf4", "fp4", "fp8"]
KvCacheDtype = Literal["auto", "fp32", "fp16", "bf16", "fp8"]
Runtime = Literal["cuda", "rocm", "cpu"]
ModelHead = Literal["causal_lm", "masked_lm", "sequence_classification", "token_classification"]
KvCacheLayout = Literal["preallocated", "tuple_per_step"]
RotaryCache = Literal["none", "per_layer"]
GptqKernel = Literal["none", "exllama", "exllamav2"]
QuantizationLoad = Literal["auto", "as_stored", "per_weight", "after_full_load"]
ModuleLoading = Literal["lazy", "eager"]
CudaVersion = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,2}\.[0-9]{1,2}$")]
Method = Literal["analytic", "rule_of_thumb"]

Count = Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]
Degree = Annotated[int, msgspec.Meta(ge=1, le=4096)]
ParameterCount = Annotated[int, msgspec.Meta(ge=1, le=10**14)]
Dimension = Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]
HfConfig = Annotated[
    dict[Annotated[str, msgspec.Meta(max_length=256)], Any], msgspec.Meta(max_length=1024)
]
"""A Hugging Face ``config.json``: real ones hold under 200 keys; nesting is bounded by
the API's JSON depth limit and the whole by the body size limit."""


class ArchitectureHints(Record):
    """Shape of a model known only by its parameter count; enables activation and KV terms."""

    num_layers: Annotated[int, msgspec.Meta(ge=1, le=4096)] | None = None
    """At most 4096: the estimate works per layer (the deepest published models have ~126)."""

    hidden_size: Dimension | None = None
    num_attention_heads: Dimension | None = None
    num_key_value_heads: Dimension | None = None
    head_dim: Dimension | None = None
    intermediate_size: Dimension | None = None
    """Feed-forward width; default 4 × hidden_size with a plain MLP."""

    vocab_size: Dimension | None = None
    gated_mlp: bool = True
    """SwiGLU-style gate and up projections (Llama); false for a GPT-2 style MLP."""


class ModelSpec(Record):
    """The model: exactly one of ``hf_config``, ``name`` or ``parameters``."""

    hf_config: HfConfig | None = None
    """The contents of a Hugging Face ``config.json`` (read offline; no hub access)."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    """A built-in preset, e.g. ``llama-3.1-8b`` (``GET /v1/models`` lists them)."""

    parameters: ParameterCount | None = None
    """A parameter count, for a model with no config at hand."""

    hints: ArchitectureHints | None = None
    """With ``parameters``: the shape, when known."""

    head: ModelHead | None = None
    """What the model ends in. Default: the architecture's usual head, ``masked_lm`` for
    BERT and RoBERTa, ``causal_lm`` for the decoders. ``sequence_classification`` and
    ``token_classification`` replace the vocabulary head by a classifier of
    ``num_labels`` (transformers' ``*ForSequenceClassification``,
    ``*ForTokenClassification``): its logits are small, which every BERT fine-tune is."""

    num_labels: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = 2
    """Classes of a classification head."""


class CpuOffload(Record):
    """ZeRO-Offload / FSDP CPU offload."""

    optimizer: bool = False
    """Optimizer states (and the fp32 master copy) live in host memory."""

    parameters: bool = False
    """Parameters live in host memory and are fetched per layer (ZeRO-3 / FSDP only)."""


PipelineSchedule = Literal["gpipe", "1f1b", "interleaved_1f1b"]
ExpertDispatcher = Literal["alltoall", "deepep", "hybridep"]
BackwardPrefetch = Literal["backward_pre", "backward_post", "none"]
AdapterWrapping = Literal["wrapped_separately", "in_layer_units"]


class Fsdp1(Record):
    """PyTorch FSDP1 (``FullyShardedDataParallel``, flat parameters) under
    ``framework: fsdp1``: the settings that change a step's bytes or time. Read from
    torch/distributed/fsdp at torch 2.13.0 (commit cf30153c4c13); the defaults are what
    the popular front ends pass (docs/memory.md, "FSDP1").

    Fixed, not fields: ``limit_all_gathers=True`` (FSDP1's default, kept by accelerate
    and Lightning: at most two all-gathers in flight), ``forward_prefetch=False`` (the
    default everywhere; FSDP1's docstring: "only useful for CPU-bound workloads"),
    ``keep_low_precision_grads=False`` and ``sync_module_states`` (a per-unit broadcast
    at wrapping, through buckets of at most 250 MiB; no bytes in the step). One FSDP unit
    per decoder layer and the rest (embeddings, final norm, head) in the root unit, as
    accelerate's ``transformer_based_wrap`` and Lightning's ``auto_wrap_policy={Block}``
    wrap."""

    use_orig_params: bool = True
    """FSDP1's ``use_orig_params`` (its own default False; transformers' Trainer passes
    True, Lightning's ``FSDPStrategy`` sets it, ``accelerate config`` proposes it). True:
    the optimizer steps the original parameters (views into each flat shard), and a
    unit may mix frozen and trainable parameters (``adapters: in_layer_units``). False:
    the optimizer steps whole flat parameters, so one tensor a unit."""

    param_dtype: GradientReduceDtype | None = None
    """``MixedPrecision.param_dtype`` under ``amp_*`` precisions: the dtype a unit is
    all-gathered and computed in while the sharded flat parameter stays fp32. Unset: the
    precision's half (accelerate's ``MixedPrecision(param_dtype=bf16, reduce_dtype=bf16,
    buffer_dtype=bf16)``, activations in bf16). ``fp32``: Lightning's ``bf16-mixed``
    (``param_dtype=torch.float32``, a bf16 reduce, autocast on fp32 weights). Under
    ``fp32``/``bf16``/``fp16`` it is that dtype (Lightning's ``bf16-true`` converts the
    model to bf16 first)."""

    backward_prefetch: BackwardPrefetch = "backward_pre"
    """FSDP1's ``backward_prefetch``. ``backward_pre`` (its default, Lightning's, and the
    first answer of ``accelerate config``): a unit's pre-backward hook all-gathers the
    next unit, so two units are gathered through the backward and the gathers hide
    behind its compute. ``backward_post``: the next unit is gathered after this one is
    freed (one unit at a time). ``none`` (transformers' Trainer when ``fsdp_config``
    names no ``backward_prefetch``: "NO_PREFETCH"): the next all-gather waits behind this
    unit's reduce-scatter, so the backward's communication is not overlapped (FSDP1's
    docstring: "there is no communication and computation overlap in the backward
    pass")."""

    adapters: AdapterWrapping = "wrapped_separately"
    """LoRA under FSDP1. ``wrapped_separately``: each adapter is an FSDP unit of its own
    (PEFT's ``fsdp_auto_wrap_policy``, which transformers' Trainer applies through
    ``update_fsdp_plugin_peft``; needed with ``use_orig_params: false``, whose flat
    parameters must be uniformly ``requires_grad``): the frozen base has no gradient.
    ``in_layer_units``: the adapters share their layer's flat parameter (Lightning or
    litgpt with ``auto_wrap_policy={Block}``; needs ``use_orig_params``). The flat
    parameter then requires grad, so autograd computes every base weight's gradient
    (each linear keeps its input), the layer's whole flat gradient is built,
    reduce-scattered and kept as a shard until the next forward (FSDP1's docstring:
    mixing frozen and trainable parameters causes "higher than expected gradient memory
    usage"), and the adapters take the base's dtype (a flat parameter has one)."""

    accumulate_without_sync: bool = True
    """With ``gradient_accumulation_steps`` > 1, the micro-batches before the last run
    under FSDP1's ``no_sync()`` (transformers' Trainer and accelerate's
    ``accumulate()``, Lightning's ``no_backward_sync``): each trainable unit keeps its
    whole unsharded gradient (in ``param_dtype``) across them, and only the last
    micro-batch reduce-scatters ("FSDP will accumulate the full model gradients (instead
    of gradient shards) until the eventual sync"). False: every micro-batch
    reduce-scatters and the shards accumulate."""


class Parallelism(Record):
    """How the job is split across GPUs; the estimate is for one GPU."""

    tensor: Degree = 1
    pipeline: Degree = 1
    data: Degree = 1
    """Data-parallel ranks (each a replica, or a ZeRO/FSDP shard group)."""

    expert: Degree = 1
    """Expert-parallel ranks, carved out of the data-parallel ones (Megatron's EP): it
    divides ``data`` and the experts."""

    virtual_stages: Degree = 1
    """Model chunks per pipeline rank of an interleaved schedule (Megatron's
    ``--num-layers-per-virtual-pipeline-stage``): the bubble shrinks by this factor."""

    pipeline_schedule: PipelineSchedule = "1f1b"
    """``gpipe`` (all forwards, then all backwards), ``1f1b`` (one forward, one backward),
    or ``interleaved_1f1b`` with ``virtual_stages`` chunks per rank."""

    sequence_parallel: bool = False
    """Megatron sequence parallelism: norm and dropout activations split over the TP group;
    under ``framework: megatron`` each column-parallel linear keeps only its sequence
    shard of the input (all-gathered again in the backward)."""

    zero_stage: Annotated[int, msgspec.Meta(ge=0, le=3)] = 0
    """ZeRO / FSDP sharding over the data-parallel group: 1 optimizer states, 2 + gradients,
    3 + parameters (FSDP FULL_SHARD)."""

    cpu_offload: CpuOffload = msgspec.field(default_factory=CpuOffload)
    framework: Framework | None = None
    """Whose conventions decide the dtypes of sharded states, gathered parameters and
    reduced gradients. ``ddp``: PyTorch replicas (AMP keeps fp32 weights). ``fsdp1``:
    ``FullyShardedDataParallel`` with flat parameters, the default of transformers'
    Trainer, accelerate and Lightning (one flat parameter per unit, padded to a multiple
    of the ranks; fp32 shards under ``amp_*`` with ``MixedPrecision``; a unit's flat
    gradient built whole, reduced in ``gradient_reduce_dtype``, kept as an fp32 shard;
    see ``fsdp1``); ``zero_stage`` 3 (or 0) is ``FULL_SHARD``, 2 ``SHARD_GRAD_OP``. ``fsdp2``:
    ``fully_shard`` with a bf16 ``MixedPrecisionPolicy`` under ``amp_*`` (the sharded
    fp32 parameters are the master copy, activations are bf16, gradients reduce in
    fp32); ``zero_stage`` 3 (or 0) reshards after forward, 2 keeps layers gathered.
    ``deepspeed``: bf16/fp16 parameters beside an fp32 master, fp32 gradient partitions
    and its reduce bucket. ``megatron``: bf16 parameters, a full gradient buffer (in
    ``gradient_reduce_dtype``), and the activations Megatron-core's fused norms and
    bias-SwiGLU/GELU keep;
    ``zero_stage`` ≥ 1 is its distributed optimizer. It also decides what the speed
    model overlaps (docs/recommendation.md: tensor-parallel, gradient and gather traffic,
    Megatron's fused kernels). Unset: the memory estimate follows ``deepspeed`` when
    ``zero_stage`` > 0, else ``ddp``; the speed model times ZeRO-3 as ``fsdp2`` prefetches,
    tensor, pipeline, context or expert parallel layouts with ``megatron``'s overlap (not
    its fused kernels), ZeRO-1/2 as ``deepspeed`` and the rest as ``ddp``."""

    gradient_reduce_dtype: GradientReduceDtype | None = None
    """The dtype gradients are accumulated and reduced in, where the framework lets a job
    choose (``megatron``, ``fsdp1``, ``fsdp2``). ``megatron``: the dtype of its persistent gradient
    buffer. Megatron-LM reduces in fp32 under bf16 (megatron/training/arguments.py:
    "accumulate and all-reduce gradients in fp32 for bfloat16 data type", unless
    ``--grad-reduce-in-bf16``) and in the parameters' dtype under fp16; NeMo's and
    Megatron-Bridge's performance recipes set ``grad_reduce_in_fp32 = False``. A half
    buffer halves the gradients, and the optimizer step then builds an fp32 copy of the
    rank's gradients (``shard_model_grad.float()``, megatron/core/optimizer/
    distrib_optimizer.py; all of them without the distributed optimizer). ``fsdp2``:
    ``MixedPrecisionPolicy.reduce_dtype`` (torchtitan's default fp32 under a bf16
    policy): the layer's gradients are cast to it for the reduce-scatter. ``fsdp1``:
    ``MixedPrecision.reduce_dtype`` (accelerate and Lightning set the precision's half;
    torch infers ``param_dtype`` when only that is given, _flat_param.py
    ``_init_param_reduce_dtypes``): the flat gradient is cast to it before the
    reduce-scatter. Unset: those defaults. Also the gradient traffic the speed model
    times."""

    init: ParameterInit = "meta"
    """How a sharded model is built: ``meta`` (on the meta device, each rank materializing
    only its shards, as torchtitan and DeepSpeed's ``zero.Init`` do; under ``fsdp1`` also
    a model on the CPU wrapped with ``device_id``, which FSDP1 moves to the GPU one unit
    at a time, as accelerate and Lightning pass it) or ``materialized`` (the whole model
    is built on every GPU and sharded afterwards, e.g. ``model.cuda()`` before wrapping:
    a peak of the full model's bytes before training starts, and under ``fsdp1`` one
    unit's flattened copy beside it)."""

    context: Degree = 1
    """Context parallelism: each GPU holds ``sequence_length / context`` tokens of every
    sequence (ring attention passes the keys and values around); ZeRO, FSDP and
    Megatron's distributed optimizer shard over the data and context groups together.
    A GPU count is tensor x pipeline x data x context."""

    fsdp1: Fsdp1 = msgspec.field(default_factory=Fsdp1)
    """Under ``framework: fsdp1``: its flat-parameter settings (any other framework
    refuses a value that is not the default)."""

    expert_dispatcher: ExpertDispatcher = "alltoall"
    """How an MoE layer's tokens reach the expert-parallel ranks that hold their experts.
    ``alltoall``: Megatron-core's ``alltoall`` token dispatcher, one copy of a token for
    each of its routed experts, over NCCL (a send and a receive per peer). ``deepep`` and
    ``hybridep``: the ``flex`` dispatcher's backends (Megatron-core's
    ``moe_flex_dispatcher_backend``), which send a token once to each rank that holds
    any of its experts and, across nodes, once to each node over the network, forwarded
    there over NVLink (DeepEP at 92fe2dea: csrc/kernels/intranode.cu counts a token once
    per destination rank, ``is_token_in_rank``; internode.cu sends one network copy a
    node, carrying the bitmask of the node's ranks that need it,
    ``is_token_in_nvl_rank_bits``). Only the training speed model reads it: a serving
    engine's decode steps dispatch with DeepEP's low-latency kernels, which receive a
    copy per local expert (deep_ep/buffer.py ``low_latency_dispatch``: ``recv_x`` is
    ``[num_local_experts, ...]``), so serving is timed per routed expert whatever this
    says; the memory estimate does not count the flex dispatcher's buffers."""


class Lora(Record):
    """LoRA adapters (PEFT)."""

    rank: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 16
    target_modules: (
        Annotated[
            list[Annotated[str, msgspec.Meta(min_length=1, max_length=64)]],
            msgspec.Meta(min_length=1, max_length=32),
        ]
        | None
    ) = None
    """Linear modules that get adapters, by their Hugging Face names (``q_proj``,
    ``mlp.c_proj``), or ``all-linear`` (every linear but the output head). Each must name
    a linear module of the model (422 otherwise, listing them). Default: PEFT's default
    for the model type (``q_proj``, ``v_proj`` for Llama-style models, ``c_attn`` for
    GPT-2, ``query_key_value`` for GPT-NeoX and Falcon, ``query``, ``value`` for BERT)."""

    dropout: Annotated[float, msgspec.Meta(ge=0.0, lt=1.0)] = 0.0
    """PEFT's ``lora_dropout``: dropout on each adapted linear's input before
    ``lora_A`` (default 0.0, as ``LoraConfig``'s). Above 0 every adapter keeps its
    dropout mask through the backward (1 byte per input element on CUDA, the input's
    dtype on the CPU). PEFT's own examples use 0.1 (examples/sft/run_peft_*.sh), and
    0.05 is common in axolotl and QLoRA configs."""


class Workload(Record):
    """What the job does."""

    mode: Mode
    batch_size: Count = 1
    """Micro-batch per data-parallel rank (sequences, or images)."""

    sequence_length: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] | None = None
    """Tokens per sequence (the prompt length for inference)."""

    image_size: Annotated[int, msgspec.Meta(ge=8, le=16384)] | None = None
    """Side of a square input image, for vision presets."""

    precision: Precision = "bf16"
    """``fp32``/``fp16``/``bf16``: weights and activations in that type. ``amp_*``: fp32
    weights under autocast. ``fp8``: fp8 matmuls (Transformer Engine) with bf16 weights."""

    optimizer: Optimizer = "adamw"
    gradient_checkpointing: Checkpointing = "none"
    """``full``: every checkpointed layer keeps only its input and recomputes the rest in
    its backward. ``selective``: the attention core's s×s tensors are recomputed
    (Korthikanti et al.). ``selective_op``: torchtitan's operator policy
    (torchtitan/distributed/activation_checkpoint.py): a layer keeps the outputs of
    attention and of every other matmul (q, v, the gate projection, the down
    projection) and recomputes the rest."""

    checkpoint_every_n_layers: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 1
    """With ``full`` or ``selective_op``: checkpoint one layer in n (torchtitan's
    ``selective_ac_option`` as an integer); the others keep all their activations."""

    keep_outputs: bool = False
    """Training: the loop holds the model's outputs through backward and the optimizer
    step (``out = model(**batch); out.loss.backward(); opt.step()``), so the logits and,
    without checkpointing, the KV cache a causal LM returns stay alive. ``false``: as
    Hugging Face's ``Trainer``, which drops them once it has the loss."""

    loss_chunks: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 1
    """Training a causal LM: the loop computes cross-entropy itself from the model's
    logits in this many chunks along the sequence, each upcast to fp32 on its own
    (torchtune's ``CEWithChunkedOutputLoss``, litgpt's ``chunked_cross_entropy``), and
    drops the logits before backward: the loss backward holds one chunk's gradients
    rather than the whole fp32 logits' twice."""

    optimizer_in_backward: bool = False
    """Each parameter's optimizer step runs in its post-accumulate-grad hook during the
    backward and frees its gradient (torchtune's ``optimizer_in_bwd``): no moment holds
    every gradient, and there is no separate optimizer step."""

    activation_offload: bool = False
    """Saved activations move to CPU memory in the forward and come back in the backward
    (torchtune's ``OffloadActivations``, prefetching the next layer's): on the GPU only
    the layer being run holds its activations (and the loss its own)."""

    activation_offload_layers: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Only this many of the GPU's layers, the first ones, move their saved activations
    to CPU memory (Megatron-core's ``cpu_offloading_num_layers``, which turns the offload
    on by itself: megatron/training/arguments.py; Megatron-Bridge's performance presets
    offload 40 of Llama 3 70B's 80 layers on GB200 and 20 on GB300). The rest keep theirs
    on the GPU; an offloaded layer's come back for its backward with the next one's
    prefetched. 0: every layer with ``activation_offload``, else none. Fewer than the
    model's layers, and without pipeline parallelism, as Megatron-core requires. The speed
    model does not time the copies."""

    activation_func_fp8_input_store: bool = False
    """Megatron-core's ``activation_func_fp8_input_store`` (NeMo's
    ``fp8_activation_input_store``; MLPerf's ``FP8_ACTIVATION``): the fused SwiGLU of a
    gated MLP keeps its input for the backward in fp8, a byte per element instead of two
    (megatron/core/fusions/fused_bias_swiglu.py: ``input.to(torch.float8_e4m3fn) if
    fp8_input_store``; its fused GELU has no such store), in the dense MLP, the routed
    experts and the shared expert. Training only, and a framework named other than ``megatron`` refuses it: it counts
    where the framework is Megatron's, given or chosen for a layout by a recommendation's
    search (an estimate says when it did not count)."""

    compile: bool = False
    """``torch.compile`` of the layers (Llama-style and GPT-2 families): in a Llama-style
    layer fused norms keep only their input, the SwiGLU MLP only the gate and up
    projections (the product is recomputed in the backward); a GPT-2 layer's memory is
    taken as eager's (an upper bound: fusion only frees tensors). The speed model's
    memory-bound kernels and launches are fewer (a factor fitted to published runs)."""
    fused_kernels: bool = False
    """Training a GPT-2 model with flash-attention's fused kernels (its training GPT:
    ``fused_dropout_add_ln``, ``fused_mlp``, ``fused_bias_fc``, ``residual_in_fp32`` and
    ``flash_attn.losses.cross_entropy``): the speed model counts those kernels' traffic
    (gpuplan.core.perf.step's ``FUSED_*`` bytes) instead of the eager kernels', and the
    memory estimate what those kernels keep (gpuplan.core.memory.layers'
    ``_fused_gpt_halves``; the fused cross-entropy writes its gradient over the 16-bit
    logits)."""

    attention: Attention = "sdpa"
    """``eager`` materializes the s×s scores; ``sdpa``/``flash`` keep only the output and a
    log-sum-exp per query, except ``sdpa`` training in fp32 on CUDA with grouped
    key/value heads, which PyTorch runs through its math kernel (measured on an H200):
    it keeps the scores as ``eager`` does. The speed model times ``flash`` training on
    Hopper at FlashAttention-2's measured rate (what PyTorch's SDPA flash kernel runs there
    before torch 2.11; cuDNN's is faster), ``sdpa`` at the measured kernel table's."""

    gradient_accumulation_steps: Annotated[int, msgspec.Meta(ge=1, le=1 << 16)] = 1
    parallelism: Parallelism = msgspec.field(default_factory=Parallelism)
    lora: Lora | None = None
    """Adapters for ``finetune_lora``/``finetune_qlora`` (default: rank 16 on q_proj, v_proj)."""

    weight_quantization: Quantization = "none"
    """Stored format of the linear layers' weights, for inference, ``finetune_qlora``
    (whose default, ``none``, means ``nf4``) and ``finetune_lora``'s frozen base (``fp8``
    only, with ``precision: fp8``: Transformer Engine's fp8 parameters, NeMo's
    ``fp8_params``, as MLPerf's Llama 2 70B LoRA runs keep them). ``nf4``/``fp4``:
    bitsandbytes 4-bit, blocks of 64 weights with an fp32 absmax each; ``int4``:
    GPTQ/AWQ-style groups of 128 with fp16 scales and 4-bit zeros; ``int8``: LLM.int8
    with an fp32 scale per row; ``fp8``: one byte per weight (the fp8 transposes a
    backward's GEMMs read are made as they are needed: Transformer Engine fills its
    transpose cache only when asked to). Embeddings and norms stay in the compute
    dtype."""

    double_quantization: bool = False
    """bitsandbytes ``bnb_4bit_use_double_quant`` (off by default in transformers'
    ``BitsAndBytesConfig``; the QLoRA paper's recipe turns it on): each block's fp32
    absmax is quantized to 8 bits in blocks of 256, 0.5 to 0.127 bits per weight."""

    quantize_lm_head: bool = False
    """Quantize the output head too. transformers keeps ``lm_head`` in 16-bit
    (``modules_to_not_convert = ["lm_head"]``); a tied head is the embedding and is never
    quantized."""

    gptq_kernel: GptqKernel = "none"
    """Inference on ``int4`` GPTQ weights: the AutoGPTQ kernel, whose scratch buffers
    stay on the GPU beside the weights. ``exllama``: transformers' default for 4-bit
    GPTQ (``GPTQConfig``'s ``exllama_config = {"version": 1}``, transformers 4.38 to
    4.46): a dequantization buffer of the largest layer's weight in fp16 (130 MiB for a
    7B's MLP). ``exllamav2``: that and a forward scratch for 2,048 tokens × 8 sequences
    of the widest output in fp32. ``none``: kernels that keep none (AutoGPTQ's CUDA
    kernels of 8-bit weights, AutoAWQ's GEMM, vLLM's own)."""

    weight_quantization_load: QuantizationLoad = "auto"
    """How quantized weights reach the GPU. ``as_stored``: from a checkpoint already in
    the stored format (GPTQ, AWQ, a saved bitsandbytes model): nothing else is loaded.
    ``per_weight``: transformers' bitsandbytes 4-bit path (``nf4``/``fp4``), each weight
    copied to the GPU in 16-bit and quantized before the next, so one 16-bit weight at a
    time. ``after_full_load``: torchao weight-only quantization (``int8``/``int4``)
    applied after the whole model was built in the compute dtype on the GPU
    (``quantize_(model, int8_weight_only())`` / ``int4_weight_only(...)``): the 16-bit
    model is resident until quantized, its freed blocks stay reserved by the caching
    allocator, and each weight's quantization temporaries (kept alive by autograd when
    the weights require grad) add to the peak. ``auto``: ``per_weight`` for bitsandbytes
    4-bit, ``as_stored`` otherwise."""

    kv_cache_dtype: KvCacheDtype = "auto"
    """``auto``: the activation type."""

    max_new_tokens: Annotated[int, msgspec.Meta(ge=0, le=10_000_000)] = 0
    """Inference: cache room kept for this many generated tokens per sequence."""

    kv_cache_layout: KvCacheLayout = "preallocated"
    """Inference: how the generation loop keeps its cache. ``preallocated``: a serving
    engine's blocks or a static cache sized for the prompt and ``max_new_tokens``, and
    logits of the last position only (vLLM; transformers' ``generate`` since 4.45).
    ``tuple_per_step``: transformers before 4.36, whose every forward returns a new
    tuple of concatenated keys and values while the loop still holds the previous one
    (the cache is held twice at the end of a step), and whose prefill returns fp32
    logits of every position."""

    rotary_cache: RotaryCache = "none"
    """Where a rotary model's cos and sin come from. ``none``: computed for the positions
    of each forward (transformers since its rotary embedding moved to the model, and
    vLLM's few-kB table). ``per_layer``: every attention layer builds its own
    ``*RotaryEmbedding`` that precomputes cos and sin tables of ``max_position_embeddings``
    rows × the rotary width in the default dtype at construction (the weights' dtype under
    ``from_pretrained(torch_dtype=...)``) and keeps them on the GPU as buffers:
    transformers 4.38.2's Qwen2 (``Qwen2RotaryEmbedding._set_cos_sin_cache``, one per
    ``Qwen2Attention``) and Llama (``_cos_cached``/``_sin_cached``), and 4.35.2's Llama
    (``cos_cached``/``sin_cached``). 448 MiB for a
    Qwen2-7B of 28 layers, head width 128 and 32,768 positions in bf16. Needs the
    model's ``max_position_embeddings``."""


class EstimateRequest(Record):
    """A memory estimate request."""

    model: ModelSpec
    workload: Workload
    runtime: Runtime = "cuda"
    """``cpu`` adds no framework overhead (and models CPU kernels)."""

    method: Method = "analytic"
    """``rule_of_thumb`` reproduces the seed guide's formula, for comparison only."""

    gpu: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    """A catalog GPU (any lookup form): adds a fit verdict and GPU-specific overheads."""

    cuda_version: CudaVersion | None = None
    """The CUDA runtime the job's PyTorch was built with (``torch.version.cuda``), e.g.
    ``12.4``. Before 11.7 every kernel loads into the context at start-up (eager module
    loading), whatever ``module_loading`` says."""

    module_loading: ModuleLoading = "lazy"
    """``CUDA_MODULE_LOADING``: ``lazy`` (PyTorch sets it since 1.13; the Linux driver
    default since CUDA 12.2) loads kernels as they first run; ``eager`` loads all of them
    into the context at start-up, which ``device_bytes`` shows (data/runtime.toml)."""


class Breakdown(Record):
    """Bytes per component at the peak, on one GPU."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    master_weights_bytes: int
    activations_bytes: int
    kv_cache_bytes: int
    temporary_bytes: int
    framework_overhead_bytes: int
    """Everything beyond the tensors: ``device_bytes`` less the seven components above,
    the sum of the four below."""

    workspace_bytes: int = 0
    """cuBLAS workspaces, allocated through the caching allocator: part of ``peak_bytes``,
    as ``torch.cuda.max_memory_allocated`` counts them."""

    allocator_cache_bytes: int = 0
    """Segments the caching allocator holds beyond the peak (cached free blocks, splits)."""

    context_bytes: int = 0
    """CUDA/ROCm context with the kernels the job loads, outside the allocator."""

    communication_buffers_bytes: int = 0
    """NCCL communicator buffers, outside the allocator."""


class ArchitectureSummary(Record):
    """The shape the estimate used."""

    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    num_experts: int
    experts_per_token: int
    tie_word_embeddings: bool


class Fit(Record):
    """Whether the job fits the GPU named in the request."""

    gpu: str
    usable_memory_bytes: int
    required_bytes: int
    fits: bool
    utilization: float
    """required / usable."""


ByteFigure = Literal["peak_bytes", "reserved_bytes", "device_bytes"]


class ByteInterval(Record):
    """Where a measured byte count is expected to fall, in whole bytes."""

    low: int
    high: int


class EstimateResponse(Record):
    """Peak memory per GPU, with its parts."""

    method: Method
    parameters: int
    """Parameters of the whole model."""

    trainable_parameters: int
    peak_bytes: int
    """Bytes allocated at the peak, the tensors and the cuBLAS workspaces: compare with
    ``torch.cuda.max_memory_allocated``."""

    reserved_bytes: int
    """The caching allocator's segments at their most: compare with
    ``torch.cuda.max_memory_reserved`` (``peak_bytes`` and the blocks the allocator
    keeps cached beside them)."""

    device_bytes: int
    """What ``nvidia-smi`` shows for the process at the peak: ``reserved_bytes`` plus the
    CUDA context with the job's kernels and NCCL's buffers."""

    total_bytes: int
    """Deprecated: the same as ``device_bytes``."""

    required_bytes: int
    """What a GPU must have usable: the high end of ``device_bytes``'s 90% interval, the
    95th percentile of what ``nvidia-smi`` will show (never below ``device_bytes``), so
    ``fits`` means fits with at least 95% confidence (docs/memory.md, "How sure"). The
    rule of thumb keeps a flat 20% headroom."""

    headroom_fraction: float
    """``required_bytes`` / ``device_bytes`` − 1: the headroom the interval gives this job."""

    peak_phase: str
    """Where in the step the peak falls."""

    breakdown: Breakdown
    architecture: ArchitectureSummary | None
    assumptions: list[str]
    warnings: list[str]
    fit: Fit | None = None

    intervals: dict[ByteFigure, ByteInterval] = {}
    """90% intervals of ``peak_bytes``, ``reserved_bytes`` and ``device_bytes``: the
    measured figure falls between ``low`` and ``high`` 9 times in 10, judged by the
    estimate's errors on published real-GPU figures of the same regimes (the figure, the
    mode, how the job is split, the weights' quantization), widened where no
    published case has its regime. Empty for the rule of thumb."""
