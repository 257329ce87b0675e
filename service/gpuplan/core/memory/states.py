"""Model states on one GPU: weights, gradients, optimizer states and master weights.

The per-parameter byte counts are the ZeRO paper's (Rajbhandari et al. 2020) with the
framework conventions spelled out: PyTorch AMP trains fp32 weights (which are their
own master copy), so AdamW costs 4 + 4 + 8 = 16 B/param; DeepSpeed and FSDP mixed
precision keep half-precision weights and gradients beside an fp32 master, 2 + 2 + 4
+ 8 = 16 B/param, which ZeRO stages then shard over the data-parallel group.
"""

import msgspec

from gpuplan.core.memory import adafactor, fsdp1
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.gptq import exllama_buffer_bytes
from gpuplan.core.memory.modules import lora_parameters, lora_targets
from gpuplan.core.memory.numerics import DTYPE_BYTES, half_dtype
from gpuplan.core.memory.parameters import LayerParameters, ParameterCount, distinct
from gpuplan.core.memory.schema import Workload
from gpuplan.core.memory.states_records import ModelStates, StateBytes

BNB_BLOCK = 64
"""bitsandbytes 4-bit: weights per absmax block (``quantize_4bit``'s default blocksize,
bitsandbytes/functional.py at 95f9af3)."""

BNB_NESTED_BLOCK = 256
"""Double quantization: absmax values per 8-bit block (``quantize_blockwise(_absmax -
offset, blocksize=256)``, same file)."""

GPTQ_GROUP = 128


def quantized_bytes(fmt: str, *, double_quantization: bool = False) -> float:
    """Stored bytes per weight of ``fmt``.

    * ``nf4``/``fp4`` (bitsandbytes): packed 4-bit weights (0.5 B) and an fp32 absmax
      per block of 64; with double quantization an 8-bit absmax per block and an fp32
      one per 256 blocks (the QLoRA paper, section 3: 0.5 bits per weight become 0.127).
    * ``int4`` (GPTQ, auto_gptq/nn_modules/qlinear/qlinear_exllama.py at 129fa4b):
      ``qweight`` int32 of in/8 x out (0.5 B), ``qzeros`` int32 of in/128 x out/8 and
      ``scales`` fp16 of in/128 x out per group of 128.
    * ``int8`` (LLM.int8): one byte and an fp32 scale per output row (read as per
      4096 weights); ``fp8``: one byte.
    """
    if fmt in ("nf4", "fp4"):
        if double_quantization:
            return 0.5 + 1 / BNB_BLOCK + 4 / (BNB_BLOCK * BNB_NESTED_BLOCK)
        return 0.5 + 4 / BNB_BLOCK
    if fmt == "int4":
        return 0.5 + (2 + 0.5) / GPTQ_GROUP
    if fmt == "int8":
        return 1.0 + 4 / 4096
    if fmt == "fp8":
        return 1.0
    return 0.0


def sharded_quantized_bytes(fmt: str) -> float:
    """Of :func:`quantized_bytes`, what FSDP and ZeRO-3 shard: a parameter's own data.

    Both shard ``nn.Parameter`` data only. bitsandbytes keeps a 4-bit weight's absmax
    constants in a ``QuantState`` held by the module and re-attached to each shard
    (bitsandbytes/nn/modules.py at 20e1677: ``fix_4bit_weight_quant_state_from_module``,
    "the quant state got lost when the parameter got converted. This happens for
    example for fsdp"), so every rank holds all of them; GPTQ's ``qweight``, ``qzeros``
    and ``scales`` are registered buffers, which neither shards.
    """
    if fmt in ("nf4", "fp4"):
        return 0.5
    if fmt in ("int8", "fp8"):
        return 1.0
    return 0.0


def quantization_of(w: Workload) -> str:
    """The stored format of the linear layers' weights (``none``: the compute dtype)."""
    if w.mode == "finetune_qlora":
        return "nf4" if w.weight_quantization == "none" else w.weight_quantization
    if w.mode == "finetune_lora":  # the frozen base in fp8 (TE's fp8 parameters) or not
        return w.weight_quantization
    return w.weight_quantization if w.mode == "inference" else "none"


def bnb_4bit(w: Workload) -> bool:
    """bitsandbytes 4-bit weights, which dequantize per matmul and load via 16-bit."""
    return quantization_of(w) in ("nf4", "fp4")


def quantization_load(w: Workload) -> str:
    """How the quantized weights reach the GPU (``Workload.weight_quantization_load``,
    ``auto`` resolved): ``as_stored``, ``per_weight`` or ``after_full_load``."""
    fmt = quantization_of(w)
    if fmt == "none":
        return "as_stored"
    if w.weight_quantization_load != "auto":
        return w.weight_quantization_load
    return "per_weight" if fmt in ("nf4", "fp4") else "as_stored"


def _local_parameters(arch: Architecture, counts: ParameterCount, w: Workload) -> tuple[int, int]:
    """(parameters on the most loaded GPU, of which in its layers)."""
    p = w.parallelism
    tp, pp, ep = p.tensor, p.pipeline, p.expert
    layers_per_stage = -(-arch.num_layers // pp)
    per_layer = []
    for lp in distinct(counts.layers):  # each kind of layer once
        mlp = lp.mlp
        if arch.moe is not None and lp.mlp != lp.active_mlp and ep > 1:
            mlp = lp.mlp // ep
        per_layer.append((lp.attention + mlp) / tp + lp.norms)
    stage = max(per_layer, default=0.0) * layers_per_stage
    first = counts.embedding / tp
    last = (counts.head + counts.final) / tp
    if pp == 1:
        ends = first + last
    else:
        ends = max(first, last + (counts.embedding / tp if arch.tie_word_embeddings else 0))
    return round(stage + ends), round(stage)


def layer_parameters_local(arch: Architecture, counts: ParameterCount, w: Workload) -> int:
    """Parameters of the layers on the most loaded GPU."""
    return _local_parameters(arch, counts, w)[1]


def framework_of(w: Workload) -> str:
    """The framework whose conventions apply: given, or DeepSpeed's for ZeRO (and for fp8,
    whose Transformer Engine recipe keeps an fp32 master), else DDP's."""
    p = w.parallelism
    if p.framework is not None:
        return p.framework
    training = w.mode != "inference"
    return "deepspeed" if training and (p.zero_stage > 0 or w.precision == "fp8") else "ddp"


REDUCE_DTYPE_FRAMEWORKS = ("megatron", "fsdp1", "fsdp2")
"""The frameworks that let a job choose the dtype its gradients reduce in."""


def gradient_reduce_dtype(w: Workload) -> str:
    """The dtype gradients are accumulated and reduced in (``parallelism.
    gradient_reduce_dtype``, else the framework's default for the precision)."""
    given = w.parallelism.gradient_reduce_dtype
    if given is not None:
        return given
    half = half_dtype(w.precision)
    if framework_of(w) == "megatron":
        # arguments.py forces fp32 accumulation for bf16 only; fp16 keeps its own dtype.
        return "fp16" if half == "fp16" else "fp32"
    if framework_of(w) == "fsdp1":
        return fsdp1.default_reduce_dtype(w)
    # The stored weights' dtype: fp32 shards under FSDP2's mixed-precision policy reduce
    # in fp32 (torchtitan's mixed_precision_reduce default), half-precision ones in theirs.
    return "fp32" if _stored_bytes(w) == 4.0 else half


def _stored_bytes(w: Workload) -> float:
    """Bytes of a stored (sharded, updated) weight under full training."""
    if w.precision.startswith("amp_") or w.precision == "fp32":
        return 4.0
    if framework_of(w) == "fsdp2" and w.precision == "fp8":
        return 4.0  # torchao float8 with FSDP2: fp32 shards, bf16 and fp8 compute
    return 2.0


def shard_stage(w: Workload) -> int:
    """The ZeRO stage in effect: FSDP2 always shards parameters (3) unless asked to keep
    them gathered from forward to backward (2)."""
    p = w.parallelism
    if framework_of(w) in ("fsdp1", "fsdp2"):
        return 3 if p.zero_stage in (0, 3) else p.zero_stage
    return p.zero_stage


def shard_degree(w: Workload) -> int:
    """Ranks a sharded state is split over: data x context in every framework that
    shards. Context-parallel ranks hold the same parameters and see other tokens, so
    they reduce gradients together and share the shards: Megatron-core's distributed
    optimizer takes ``get_data_parallel_group(with_context_parallel=True)``
    (NVIDIA/Megatron-LM megatron/core/optimizer/__init__.py at d086a2e), torchtitan's
    FSDP2 shards over its ``dp_shard_cp`` mesh, DeepSpeed's Ulysses over the sequence
    data-parallel group."""
    p = w.parallelism
    return p.data * p.context


def compute_bytes(w: Workload) -> float:
    """Bytes of a weight as the matmuls read it (fp32 only for fp32 training)."""
    return 4.0 if w.precision == "fp32" else 2.0


def _bytes_per_parameter(w: Workload) -> StateBytes:
    """The framework conventions behind the byte counts (see the module docstring)."""
    training = w.mode != "inference"
    half = 4.0 if w.precision == "fp32" else 2.0
    if w.mode in ("finetune_lora", "finetune_qlora"):
        return _adapter_bytes(w)
    if not training:
        return StateBytes(weights=half, grads=0.0, states=0.0, master=0.0)
    framework = framework_of(w)
    stored = _stored_bytes(w)
    if framework in ("fsdp1", "fsdp2"):
        # fully_shard and FSDP1 keep parameters in their own dtype (fp32 under a bf16
        # mixed-precision policy): the shards are the optimizer's parameters, no master.
        return StateBytes(weights=stored, grads=stored, states=stored, master=0.0)
    if framework == "deepspeed":
        # DeepSpeed docs (memory.rst): 2 B fp16/bf16 parameters and gradients, and per
        # rank fp32 parameters, gradients and Adam's two moments of its partition.
        return StateBytes(
            weights=half,
            grads=half,
            states=4.0,
            master=4.0 if half == 2 else 0.0,
            grad_partition=4.0 if half == 2 else 0.0,
        )
    if framework == "megatron":
        # Megatron-LM: bf16 parameters, a full main-gradient buffer (fp32 unless reduced
        # in half precision, then copied to fp32 for the step), fp32 master parameters and
        # Adam moments (sharded by its distributed optimizer).
        grads = DTYPE_BYTES[gradient_reduce_dtype(w)]
        return StateBytes(
            weights=half,
            grads=grads,
            states=4.0,
            master=4.0 if half == 2 else 0.0,
            grad_partition=4.0 if grads < 4.0 else 0.0,
        )
    # PyTorch: AMP trains fp32 weights; pure precisions keep Adam's moments in the
    # parameter dtype.
    return StateBytes(weights=stored, grads=stored, states=stored, master=0.0)


def _adapter_bytes(w: Workload) -> StateBytes:
    """PEFT keeps adapters in fp32 (autocast_adapter_dtype); the base is frozen, in fp32
    under autocast (amp_*) and in the training dtype otherwise. Adapters inside an FSDP1
    layer's unit take the base's dtype (a flat parameter has one)."""
    base = 4.0 if w.precision.startswith("amp_") else (4.0 if w.precision == "fp32" else 2.0)
    adapter = base if framework_of(w) == "fsdp1" and fsdp1.adapters_in_layers(w) else 4.0
    return StateBytes(weights=base, grads=adapter, states=adapter, master=0.0)


def model_buffers(arch: Architecture, w: Workload) -> float:
    """Bytes of the buffers a model registers beside its parameters, on every GPU.

    GPT-BigCode keeps a causal mask of ``max_position_embeddings`` squared booleans
    (transformers 5.24, models/gpt_bigcode/modeling_gpt_bigcode.py: ``self.bias =
    nn.Buffer(torch.tril(torch.ones((max_positions, max_positions), dtype=torch.bool)),
    persistent=False)``): 1 MiB at 1,024 positions, 64 MiB at StarCoder's 8,192.
    Rotary tables are a few kB, unless the request says every layer precomputes its own
    (``rotary_cache``: :func:`rotary_table_bytes`). AutoGPTQ's exllama kernels keep
    their scratch beside the model (``gptq_kernel``: gptq.exllama_buffer_bytes).
    """
    table = rotary_table_bytes(arch, w) + exllama_buffer_bytes(arch, w)
    if arch.model_type == "gpt_bigcode":
        return float(arch.learned_positions**2) + table
    return table


def rotary_table_bytes(arch: Architecture, w: Workload) -> float:
    """The cos and sin tables of ``rotary_cache: per_layer``, this GPU's layers' worth.

    transformers 4.38.2, models/qwen2/modeling_qwen2.py: each ``Qwen2Attention`` builds
    ``Qwen2RotaryEmbedding(self.head_dim, max_position_embeddings=...)``, whose
    ``__init__`` calls ``_set_cos_sin_cache(seq_len=max_position_embeddings, ...,
    dtype=torch.get_default_dtype())``: ``emb = torch.cat((freqs, freqs), dim=-1)``
    (positions × the rotary width) and ``register_buffer("cos_cached",
    emb.cos().to(dtype), persistent=False)``, the same for ``sin_cached``.
    ``from_pretrained(torch_dtype=...)`` sets the default dtype to the weights' while it
    builds the model, so the tables take the weights' width (fp32 under autocast, whose
    weights are fp32); the model's move to the GPU takes the buffers along. Llama's
    ``LlamaRotaryEmbedding`` of the same release keeps ``_cos_cached``/``_sin_cached``
    the same way, and 4.35.2's (models/llama/modeling_llama.py) ``cos_cached`` and
    ``sin_cached`` through the same ``_set_cos_sin_cache``.
    """
    if w.rotary_cache != "per_layer" or arch.position != "rotary":
        return 0.0
    width = (
        arch.mla.qk_rope_head_dim
        if arch.mla is not None
        else int(arch.head_dim * arch.rotary_fraction)
    )
    layers = -(-arch.num_layers // w.parallelism.pipeline)
    dtype = 4 if w.precision == "fp32" or w.precision.startswith("amp_") else 2
    return 2.0 * arch.rotary_positions * width * dtype * layers


def _buffers(
    w: Workload,
    *,
    in_layers: int,
    largest: float,
    gathered: float,
    root: float,
) -> tuple[float, float]:
    """(all-gather and communication buffers alive throughout, a layer backward's extra)."""
    stage, framework, dp = shard_stage(w), framework_of(w), shard_degree(w)
    training = w.mode != "inference"
    compute = compute_bytes(w)
    gather, reduce = 0.0, 0.0
    if stage >= 3:
        gather = 2 * gathered  # the layer being computed and the one prefetched
        if framework == "deepspeed":
            # ZeRO-3 keeps fetched parameters resident up to stage3_max_live_parameters
            # (default 1e9 elements, released only beyond it or past max_reuse_distance).
            gather = max(
                gather, min(DEEPSPEED_MAX_LIVE * compute, in_layers * gathered / max(largest, 1.0))
            )
    elif framework == "fsdp2" and stage == 2 and dp > 1:
        # reshard_after_forward=False: every layer stays gathered from its forward on.
        gather = in_layers * gathered / max(largest, 1.0)
    if framework == "fsdp2" and dp > 1:
        # The root module (embeddings, final norm, head) is not resharded after its
        # forward (fully_shard's default for the root: reshard_after_forward=None means
        # "False for root modules"): its parameters stay gathered through the step.
        gather += root * compute
    if framework == "fsdp2" and dp > 1 and w.mode == "training":
        # A layer's unsharded gradients in the compute dtype, cast to the reduce dtype
        # (fp32 under a mixed-precision policy) for reduce-scatter.
        cast = DTYPE_BYTES[gradient_reduce_dtype(w)]
        reduce = largest * (compute + (cast if cast != compute else 0.0))
    if framework == "deepspeed" and training and stage >= 1:
        # The contiguous-gradient bucket is allocated whole, whatever the number of
        # trainable parameters: reduce_bucket_size elements of the engine's dtype
        # (stage3.py at 38327e0: ``torch.empty(self.reduce_bucket_size, dtype=self.dtype,
        # ...)`` once at optimizer init; stage_1_and_2.py: the same at each backward).
        gather += DEEPSPEED_REDUCE_BUCKET * compute
    return gather, reduce


DEEPSPEED_MAX_LIVE = 1_000_000_000
"""``stage3_max_live_parameters`` default (same file: ``Field(pp_int(1e9), ...)``, "The
maximum number of parameters resident per GPU before releasing")."""

DEEPSPEED_REDUCE_BUCKET = 500_000_000
"""DeepSpeed's ``reduce_bucket_size`` default, in elements (deepspeed/runtime/zero/config.py
at 1b88ac3: ``reduce_bucket_size: int = Field(pp_int(5e8), ge=0)``, "Number of elements
reduced/allreduced at a time")."""


def model_states(
    arch: Architecture, counts: ParameterCount, w: Workload, *, runtime: str
) -> ModelStates:
    p = w.parallelism
    dp = shard_degree(w)
    stage = shard_stage(w)
    framework = framework_of(w)
    local, in_layers = _local_parameters(arch, counts, w)
    largest = counts.largest_layer / p.tensor
    training = w.mode != "inference"
    per = _bytes_per_parameter(w)
    compute = compute_bytes(w)
    weights, replicated, gathered = _weights(
        counts, w, local=local, in_layers=in_layers, largest=largest, weight_bytes=per.weights
    )
    trainable, trainable_local = 0, 0.0
    if w.mode in ("finetune_lora", "finetune_qlora"):
        rank = w.lora.rank if w.lora else 16
        targets, _ = lora_targets(arch, w.lora.target_modules if w.lora else None)
        trainable = lora_parameters(arch, targets, rank)
        trainable_local = trainable / (p.tensor * p.pipeline)
        weights += trainable_local * 4.0
        biggest = float(max(arch.hidden_size, arch.intermediate_size) * rank)
    elif training:
        trainable, trainable_local = counts.total, float(local)
        biggest = largest_tensor(arch) / p.tensor
    else:
        biggest = 0.0
    gradients = trainable_local * per.grads
    optimizer = trainable_local * _optimizer_states(w.optimizer, per.states) if training else 0.0
    if training and w.optimizer == "adafactor" and framework not in FLATTENING_FRAMEWORKS:
        optimizer = _factored_states(arch, counts, w) / (p.tensor * p.pipeline) * per.states
    master = trainable_local * per.master
    partition = trainable_local * per.grad_partition if training else 0.0
    temp = (
        _optimizer_temporary(w.optimizer, runtime, trainable_local, biggest, per.states)
        if training
        else 0.0
    )
    if framework in ("deepspeed", "megatron") and w.optimizer in ("adam", "adamw"):
        # Both step with a FusedAdam that updates in place (multi-tensor apply): DeepSpeed's
        # own, and Megatron-core's Transformer Engine one, else apex's
        # (megatron/core/optimizer/__init__.py at d98e8a64dd: "from
        # transformer_engine.pytorch.optimizers import FusedAdam as Adam").
        temp = 0.0
    if training and stage >= 1:
        optimizer, master, temp, partition = optimizer / dp, master / dp, temp / dp, partition / dp
    if training and stage >= 2:
        # Stage 2 partitions gradients (ZeRO-2 reduces each bucket to the rank that owns
        # it: DeepSpeed's estimator still counts 2 B for every gradient, an upper bound).
        gradients /= dp
    gather, reduce = _buffers(
        w,
        in_layers=in_layers,
        largest=largest,
        gathered=gathered,
        root=(counts.embedding + counts.head + counts.final) / p.tensor,
    )
    if stage >= 2 and dp > 1 and (stage >= 3 or framework == "fsdp2"):
        weights = (weights - replicated) / dp + replicated
    if p.cpu_offload.optimizer:
        optimizer = master = temp = partition = 0.0
    if p.cpu_offload.parameters and stage >= 3:
        weights = 0.0
    weights += model_buffers(arch, w)
    states = ModelStates(
        parameters_local=local,
        trainable=trainable,
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        master=master,
        # DeepSpeed builds its partition's fp32 gradients for the step (and frees them).
        optimizer_temporary=temp + partition,
        gather=gather,
        reduce=reduce,
        largest_layer=largest * compute,
    )
    if framework == "fsdp1" and training:
        return _flat_parameters(arch, counts, w, states, runtime=runtime)
    return states


def _flat_parameters(
    arch: Architecture, counts: ParameterCount, w: Workload, states: ModelStates, *, runtime: str
) -> ModelStates:
    """FSDP1's units on this GPU (see :mod:`gpuplan.core.memory.fsdp1`): padded shards
    of every unit, the gathered root and layers at each moment, each trainable unit's
    flat gradient built whole at the end of its backward, and (with adapters inside
    their layers) every layer's gradient."""
    p = w.parallelism
    ranks = shard_degree(w)
    lora = w.mode in ("finetune_lora", "finetune_qlora")
    in_layers = fsdp1.adapters_in_layers(w)
    local_layers = -(-arch.num_layers // p.pipeline)
    adapters = states.trainable / p.tensor if lora else 0.0
    per_layer_adapters = adapters / max(arch.num_layers, 1)
    u = fsdp1.units(
        counts,
        tp=p.tensor,
        local_layers=local_layers,
        in_layer_adapters=per_layer_adapters if in_layers else 0.0,
    )
    stored = _stored_bytes(w)
    gathered = fsdp1.gather_bytes(w)
    quantized = quantization_of(w)
    weights = states.weights
    if quantized == "none" and not p.cpu_offload.parameters:
        weights = fsdp1.shard_elements(u, ranks) * stored
        if lora and not in_layers:
            weights += fsdp1.padded_shard(adapters, ranks) * 4.0  # PEFT's fp32 adapters
    # Which units train: all (full training), the layers (adapters inside them), or
    # only the adapters' own units.
    trained_layers = not lora or in_layers
    per = _bytes_per_parameter(w)
    if trained_layers:
        trained = [*u.layers, *([] if lora else [u.root])]
        layer_unit = max(u.layers, default=0.0)
    else:
        trained = [adapters]
        layer_unit = per_layer_adapters
    shards = sum(fsdp1.padded_shard(n, ranks) for n in trained)
    gradients = shards * per.grads
    step_gradients = None
    if fsdp1.without_sync(w):
        # no_sync(): each trainable unit's unsharded flat gradient accumulates across the
        # micro-batches; the last one reduce-scatters it into the shards the step reads.
        step_gradients = gradients
        gradients = sum(trained) * gathered
    elements = (adapters if lora else float(states.parameters_local)) / ranks
    if not p.fsdp1.use_orig_params and not lora:
        elements = shards  # the optimizer steps the padded flat shards
    optimizer = elements * _optimizer_states(w.optimizer, per.states)
    temp = _flat_optimizer_temporary(
        arch, w, u, runtime=runtime, elements=elements, state_bytes=per.states, ranks=ranks
    )
    if p.cpu_offload.optimizer:
        optimizer = temp = 0.0
    reduce_dtype = gradient_reduce_dtype(w)
    # The MLP half's peak comes with its first linear's weight gradient (the down
    # projection's, computed first); the others come as the MLP's activations are freed.
    down = max((lp.mlp / p.tensor for lp in counts.layers[:local_layers]), default=0.0) / (
        3 if arch.mlp_gated else 2
    )
    g = fsdp1.gathers(
        u,
        w,
        ranks=ranks,
        stored=stored,
        layer_bytes=gathered if quantized == "none" else sharded_quantized_bytes(quantized),
        stage=shard_stage(w),
    )
    return msgspec.structs.replace(
        states,
        weights=weights + model_buffers(arch, w),
        gradients=gradients,
        optimizer=optimizer,
        master=0.0,
        optimizer_temporary=temp,
        gather=g.layers,
        gather_forward=g.forward,
        gather_loss_backward=g.loss_backward,
        gather_embedding=g.root,
        gather_bottom=g.bottom,
        reduce=layer_unit * gathered,
        reduce_mlp=(down if trained_layers else 0.0) * gathered,
        reduce_end=fsdp1.flat_gradient(layer_unit, w, reduce_dtype),
        root_gradient=0.0 if lora else u.head * gathered,
        root_reduce=0.0 if lora else fsdp1.flat_gradient(u.root, w, reduce_dtype),
        step_gradients=step_gradients,
        # Wrapping flattens a unit into a new tensor and clones this rank's chunk before
        # freeing it: the first layer beside the whole model, or the root (wrapped last)
        # beside the layers' shards.
        init_extra=max(
            max(u.layers, default=0.0) * (1 + 1 / ranks),
            u.root * (1 + 1 / ranks) - sum(u.layers) * (1 - 1 / ranks),
        )
        * stored,
    )


def _flat_optimizer_temporary(
    arch: Architecture,
    w: Workload,
    u: fsdp1.Units,
    *,
    runtime: str,
    elements: float,
    state_bytes: float,
    ranks: int,
) -> float:
    """``optimizer.step()``'s temporaries over FSDP1's tensors: with ``use_orig_params``
    the original parameters' views into the shards (none larger than a unit's shard),
    else one flat shard a unit."""
    largest_shard = fsdp1.padded_shard(max([*u.layers, u.root]), ranks)
    if w.mode in ("finetune_lora", "finetune_qlora"):
        rank = w.lora.rank if w.lora else 16
        biggest = float(max(arch.hidden_size, arch.intermediate_size) * rank)
    else:
        biggest = float(largest_tensor(arch)) / w.parallelism.tensor
    biggest = min(biggest, largest_shard) if w.parallelism.fsdp1.use_orig_params else largest_shard
    return _optimizer_temporary(w.optimizer, runtime, elements, biggest, state_bytes)


def _weights(
    counts: ParameterCount,
    w: Workload,
    *,
    local: float,
    in_layers: float,
    largest: float,
    weight_bytes: float,
) -> tuple[float, float, float]:
    """(Weight bytes on this GPU before sharding, the part no sharding splits, one
    gathered layer's bytes)."""
    compute = compute_bytes(w)
    quantized = quantization_of(w)
    if quantized == "none":
        # torchao's float8 with FSDP2 all-gathers weights already cast to fp8
        # (enable_fsdp_float8_all_gather, its tensorwise recipe).
        fp8_gather = w.precision == "fp8" and framework_of(w) == "fsdp2"
        return local * weight_bytes, 0.0, largest * (1.0 if fp8_gather else compute)
    # Linear weights take the stored format; embeddings, norms and (unless asked) the
    # head stay in the compute dtype (bitsandbytes skips them).
    stored = quantized_bytes(quantized, double_quantization=w.double_quantization)
    head = counts.head / w.parallelism.tensor if w.quantize_lm_head else 0.0
    shardable = sharded_quantized_bytes(quantized)
    return (
        (in_layers + head) * stored + (local - in_layers - head) * compute,
        (in_layers + head) * (stored - shardable),
        largest * shardable,
    )


def bare_states(parameters: int, w: Workload, *, runtime: str) -> ModelStates:
    """Model states of a model known only by its parameter count (all in layers)."""
    layer = LayerParameters(attention=parameters, mlp=0, norms=0, active_mlp=0)
    counts = ParameterCount(total=parameters, embedding=0, head=0, final=0, layers=[layer])
    shape = Architecture(
        model_type="unknown", family="llama", num_layers=1, hidden_size=1, num_heads=1, num_kv_heads=1,
        head_dim=1, intermediate_size=1, vocab_size=1, tie_word_embeddings=False, mlp_gated=True,
        activation="silu", norm="rms", position="none",
    )  # fmt: skip
    return model_states(shape, counts, w, runtime=runtime)


def largest_tensor(arch: Architecture) -> int:
    """Elements of the largest single parameter tensor (HF stores MoE experts as one)."""
    word = arch.word_embed_dim or arch.hidden_size
    return max(arch.vocab_size * word, largest_layer_tensor(arch))


def largest_layer_tensor(arch: Architecture) -> int:
    """Elements of the largest parameter tensor inside a layer."""
    h = arch.hidden_size
    candidates = [h * arch.intermediate_size, h * arch.q_dim]
    if arch.moe is not None:
        candidates.append(arch.moe.num_experts * 2 * arch.moe.expert_intermediate_size * h)
    return max(candidates)


FLATTENING_FRAMEWORKS = ("fsdp1", "deepspeed", "megatron")
"""Frameworks whose optimizer steps flat 1-D shards or partitions of the parameters."""


def _factored_states(arch: Architecture, counts: ParameterCount, w: Workload) -> float:
    """Elements of Adafactor's state over the model's trainable tensors, shaped as the
    model holds them (:mod:`gpuplan.core.memory.adafactor`)."""
    if w.mode in ("finetune_lora", "finetune_qlora"):
        targets, _ = lora_targets(arch, w.lora.target_modules if w.lora else None)
        rank = w.lora.rank if w.lora else 16
        return adafactor.state_elements(arch, counts, lora_rank=rank, adapted=targets)
    return adafactor.state_elements(arch, counts)


def _optimizer_states(optimizer: str, state_bytes: float) -> float:
    """Bytes of optimizer state per trainable parameter (Adafactor's over flattened
    parameters: every one is a vector, whose variance it keeps whole)."""
    if optimizer in ("adamw", "adam"):
        return 2 * state_bytes  # first and second moments
    if optimizer in ("sgd_momentum", "lion"):
        return state_bytes  # one momentum buffer
    if optimizer == "adamw_8bit":
        return 2.0  # bitsandbytes: one byte per moment (block-wise quantized)
    if optimizer == "adafactor":
        return state_bytes
    return 0.0


def _optimizer_temporary(
    optimizer: str, runtime: str, trainable: float, largest: float, state_bytes: float
) -> float:
    """Extra bytes inside ``step()``.

    On CUDA, torch's default foreach Adam(W) builds ``sqrt(exp_avg_sq)`` for the whole
    parameter group at once; the CPU default loops over tensors and holds two
    temporaries the size of the largest one.
    """
    if optimizer in ("adamw", "adam"):
        if runtime == "cpu":
            return 2 * largest * state_bytes
        return trainable * state_bytes
    if optimizer in ("lion", "adafactor"):
        return 2 * largest * state_bytes
    return 0.0
