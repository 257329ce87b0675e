"""The memory estimate: one pure function from request to response.

``estimate`` resolves the model to an :class:`Architecture`, counts its parameters,
places the model states on one GPU, prices every layer's activations, walks the
step's timeline to its peak, and adds what lives outside the tensors. Nothing here
reads the clock, the environment or the network.
"""

from operator import attrgetter

import msgspec

from gpuplan.core.catalog import Catalog
from gpuplan.core.memory import fsdp1, torchao
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.checks import check_workload
from gpuplan.core.memory.dims import Dims, dims_for
from gpuplan.core.memory.head import HeadCost, head_cost
from gpuplan.core.memory.inference import inference_peak, kv_bytes_per_token, mask_bytes
from gpuplan.core.memory.kernels import keeps_attention_weights
from gpuplan.core.memory.layers import adapter_dropout, layer_cost
from gpuplan.core.memory.layers_records import LayerCost, Step, Trainable
from gpuplan.core.memory.model import resolve_model
from gpuplan.core.memory.modules import linear_modules, lora_targets
from gpuplan.core.memory.numerics import DTYPE_BYTES, FP32, Numerics, numerics_for
from gpuplan.core.memory.parameters import (
    LayerParameters,
    ParameterCount,
    count_parameters,
    distinct,
)
from gpuplan.core.memory.peak import Peak
from gpuplan.core.memory.reserve import (
    UNREPLAYED_CACHE,
    allocator_gap,
    inference_pattern,
    layer_tensors,
    quantization_reserve,
    training_pattern,
)
from gpuplan.core.memory.reserve import Step as ReplayStep
from gpuplan.core.memory.response import describe, respond, rule_of_thumb
from gpuplan.core.memory.schema import (
    EstimateRequest,
    EstimateResponse,
    Parallelism,
    Precision,
    Workload,
)
from gpuplan.core.memory.states import (
    bare_states,
    bnb_4bit,
    framework_of,
    largest_layer_tensor,
    largest_tensor,
    layer_parameters_local,
    model_states,
    quantization_load,
    quantization_of,
    quantized_bytes,
    shard_stage,
)
from gpuplan.core.memory.states_records import ModelStates
from gpuplan.core.memory.training import training_peak
from gpuplan.core.memory.training_records import LayerGrads
from gpuplan.core.memory.vision import vision_peak


def estimate(request: EstimateRequest, catalog: Catalog) -> EstimateResponse:
    """Peak GPU memory of the request's job on one GPU.

    Raises :class:`InvalidModel`, naming the offending field.
    """
    w = request.workload
    gpu = catalog.lookup(request.gpu, "$.gpu") if request.gpu is not None else None
    model = resolve_model(request.model)
    arch, bare, assumptions = model.arch, model.parameters, list(model.notes)
    check_workload(arch, w, vision=model.vision is not None)
    if arch is None:
        assert bare is not None
        counts = None
    else:
        counts = model.counts or count_parameters(arch)
        if bare is not None:
            assumptions.append(
                f"the hinted shape has {counts.total:,} parameters; model states use the given {bare:,}"
            )
            counts = _scaled(counts, bare)
    total_parameters = counts.total if counts is not None else bare or 0
    if request.method == "rule_of_thumb":
        return rule_of_thumb(request, total_parameters, assumptions, arch, gpu)
    num = numerics_for(_compute_precision(w), request.runtime)
    assumptions.extend(describe(w, request.runtime))
    if arch is not None and w.mode in ("finetune_lora", "finetune_qlora"):
        assumptions.append(lora_targets(arch, w.lora.target_modules if w.lora else None)[1])
    warnings: list[str] = []
    if model.vision is not None:
        states = bare_states(total_parameters, w, runtime=request.runtime)
        size = w.image_size or model.vision.reference_image_size
        seen = vision_peak(
            model.vision,
            states,
            num,
            training=w.mode != "inference",
            batch=w.batch_size,
            image_size=size,
            accumulating=w.gradient_accumulation_steps > 1,
        )
        peak = msgspec.structs.replace(seen, allocator_gap=UNREPLAYED_CACHE * seen.alive())
        assumptions.append(
            f"activations: measured per sample at {model.vision.reference_image_size} px, "
            f"scaled to {size} px by area ({model.vision.source})"
        )
    elif arch is None or counts is None:
        states = bare_states(total_parameters, w, runtime=request.runtime)
        peak = Peak(
            gradients=states.gradients,
            activations=0.0,
            temporary=states.optimizer_temporary,
            kv_cache=0.0,
            phase="optimizer step" if w.mode != "inference" else "weights",
            allocator_gap=UNREPLAYED_CACHE * (states.gradients + states.optimizer_temporary),
        )
        warnings.append(
            "no architecture given: activations and the KV cache are not included; pass hints or an hf_config"
        )
    else:
        states = model_states(arch, counts, w, runtime=request.runtime)
        d = dims_for(
            arch,
            w.batch_size,
            -(-(w.sequence_length or 1) // w.parallelism.context),
            tp=w.parallelism.tensor,
            sp=w.parallelism.sequence_parallel,
        )
        costs = _layer_costs(arch, counts, d, num, w)
        if w.attention != "eager" and keeps_attention_weights(arch, w, num):
            assumptions.append(
                "attention: sdpa in fp32 with grouped key/value heads runs PyTorch's math "
                "kernel on CUDA (no fused kernel takes that call), which keeps each layer's "
                "s x s attention weights for the backward, as eager attention does"
            )
        if w.mode == "inference":
            peak = _inference(
                arch,
                d=d,
                num=num,
                w=w,
                costs=costs,
                assumptions=assumptions,
                states=states,
                replay=_replay_step(arch, counts, d=d, num=num, w=w, states=states),
            )
        else:
            peak = _training(
                arch,
                counts=counts,
                d=d,
                num=num,
                w=w,
                states=states,
                costs=costs,
                assumptions=assumptions,
            )
    if arch is not None and w.mode != "inference":
        peak = _materialized(peak, states, w, assumptions)
    return respond(
        request,
        parameters=total_parameters,
        states=states,
        peak=peak,
        arch=arch,
        assumptions=assumptions,
        warnings=warnings,
        gpu=gpu,
    )


def _layer_costs(
    arch: Architecture, counts: ParameterCount, d: Dims, num: Numerics, w: Workload
) -> list[LayerCost]:
    megatron = framework_of(w) == "megatron"
    step = Step(
        eager=keeps_attention_weights(arch, w, num),
        training=w.mode != "inference",
        selective=w.gradient_checkpointing == "selective",
        trainable=_trainable(arch, w),
        compiled=w.compile,
        fused_norms=megatron,
        fused_activation=megatron,
        fused_qkv=megatron,
        activation_input_bytes=1.0 if w.activation_func_fp8_input_store else 0.0,
        sharded_linear_inputs=megatron
        and w.parallelism.sequence_parallel
        and w.parallelism.tensor > 1,
        fused_gpt=w.fused_kernels,
    )
    p = w.parallelism
    local = -(-arch.num_layers // p.pipeline)
    # Layers of one shape cost the same: price each distinct shape once (an 80-layer
    # model has one or two), which keeps an estimate well under 100 µs.
    # LoRA dropout keeps less in layer 0 (the first stage's first), whose adapters read
    # inputs that need no gradient until one of its adapters ran: priced on its own.
    dropout = step.trainable.dropout and step.training
    priced: dict[tuple[int, int, int, int, bool], LayerCost] = {}
    costs: list[LayerCost] = []
    last: tuple[LayerParameters | None, bool, LayerCost | None] = (None, False, None)
    for index in range(local):
        layer = counts.layers[index]
        first = dropout and index == 0
        if layer is last[0] and first == last[1] and last[2] is not None:
            costs.append(last[2])  # the previous layer's record: the same key, the same cost
            continue
        key = (layer.attention, layer.mlp, layer.norms, layer.active_mlp, first)
        cost = priced.get(key)
        if cost is None:
            cost = layer_cost(arch, d, num, step, moe_layer=_is_moe(layer))
            if num.amp and step.training:
                # Autocast caches a half-precision copy of each weight it casts; each
                # linear keeps that copy for its backward, until the layer's backward.
                split = _split(layer, p)
                cost = msgspec.structs.replace(
                    cost,
                    saved=cost.saved + 2 * (layer.attention + layer.mlp) / split,
                    mlp_saved=cost.mlp_saved + 2 * layer.mlp / split,
                )
            if bnb_4bit(w):
                cost = _dequantized(cost, arch, layer, p, single_token=d.tokens == 1)
            if p.context > 1:
                # Ring attention: the keys and values of a peer's chunk arrive while the
                # next chunk's are in flight, in the forward and again in the backward.
                ring = 2 * 2 * num.matmul * d.key
                cost = msgspec.structs.replace(
                    cost,
                    attention_backward=cost.attention_backward + ring,
                    forward_peak=cost.forward_peak + ring,
                )
            if dropout:
                attention, mlp = adapter_dropout(arch, d, num, step, first=first)
                cost = msgspec.structs.replace(
                    cost, saved=cost.saved + attention + mlp, mlp_saved=cost.mlp_saved + mlp
                )
            priced[key] = cost
        costs.append(cost)
        last = (layer, first, cost)
    return costs


def _chunked_loss(head: HeadCost, d: Dims, num: Numerics, chunks: int) -> HeadCost:
    """Cross-entropy in ``chunks`` pieces along the sequence: each chunk's logits are
    upcast on their own and their log-softmax kept (all of them, for the backward), and
    the backward holds one chunk's two fp32 gradients at a time (torchtune's
    CEWithChunkedOutputLoss: "saves memory by only upcasting one chunk at a time")."""
    logits = d.logits
    # One chunk's fp32 copy: the upcast, or (already fp32) the contiguous copy that
    # flattening a chunk cut along the sequence of a batch needs.
    upcast = FP32 * logits / chunks
    return msgspec.structs.replace(
        head,
        logits_saved=FP32 * logits,
        loss_forward=num.matmul * logits + upcast,
        loss_backward=2 * FP32 * logits / chunks,
    )


def _held_outputs(
    arch: Architecture, d: Dims, num: Numerics, w: Workload, *, local_layers: int
) -> float:
    """What a loop holding the model's outputs keeps: the logits in the activation dtype,
    and a causal LM's KV cache (transformers builds one in training unless
    checkpointing turned ``use_cache`` off)."""
    logits = num.matmul * d.logits
    cache = 0.0
    if not arch.encoder and not arch.classifier and w.gradient_checkpointing == "none":
        per_token = kv_bytes_per_token(arch, num.matmul, w.parallelism.tensor)
        cache = per_token * d.tokens * local_layers
    return logits + cache


def _materialized(peak: Peak, states: ModelStates, w: Workload, assumptions: list[str]) -> Peak:
    """``init: materialized``: the whole model is built on the GPU, in its stored dtype,
    before sharding; that can be the job's peak (torchtitan builds on the meta device
    to avoid it; DeepSpeed's ``zero.Init`` partitions as it builds)."""
    if w.parallelism.init != "materialized" or shard_stage(w) < 2:
        return peak
    stored = 4.0 if w.precision in ("fp32", "amp_bf16", "amp_fp16") else 2.0
    # FSDP1 flattens each unit into a new tensor before sharding it (bottom-up: the
    # first layer beside the whole model, the root last beside the sharded layers).
    full = states.parameters_local * stored + states.init_extra
    running = (
        states.weights
        + states.optimizer
        + states.master
        + peak.gradients
        + peak.activations
        + peak.temporary
    )
    assumptions.append(
        f"init materialized: the unsharded model ({full / 2**30:.1f} GiB) is built on each GPU before sharding"
    )
    if full <= running:
        return peak
    return Peak(
        gradients=0.0,
        activations=0.0,
        temporary=full - states.weights,
        kv_cache=0.0,
        phase="materialization (before sharding)",
        allocator_gap=peak.allocator_gap,
        without_optimizer=True,
    )


def _compute_precision(w: Workload) -> Precision:
    """The dtype activations take: FSDP2's mixed-precision policy casts parameters to
    bf16 at module boundaries instead of autocasting each op, so activations are bf16
    with no fp32 copies of inputs or weights (the ``amp_*`` precisions there). FSDP1's
    ``MixedPrecision`` gathers bf16 parameters the same way (autocast, which accelerate
    adds, finds them already bf16), unless its ``param_dtype`` is fp32 (Lightning's
    ``bf16-mixed``), where autocast casts each fp32 weight as without FSDP."""
    if framework_of(w) == "fsdp1" and w.precision.startswith("amp_"):
        if fsdp1.param_dtype(w) != "fp32":
            return "fp16" if w.precision == "amp_fp16" else "bf16"
        return w.precision
    if framework_of(w) == "fsdp2" and w.precision in ("amp_bf16", "amp_fp16", "fp8"):
        # torchao's float8 linears keep their bf16 inputs for backward (and recast them).
        return "fp16" if w.precision == "amp_fp16" else "bf16"
    return w.precision


def _dequantized(
    cost: LayerCost,
    arch: Architecture,
    layer: LayerParameters,
    p: Parallelism,
    *,
    single_token: bool,
) -> LayerCost:
    """bitsandbytes 4-bit matmuls dequantize the whole weight to the compute dtype, in
    the forward and again in the backward (``MatMul4Bit``, bitsandbytes/autograd/
    _functions.py at 0.45.0: ``F.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t())``;
    backward ``grad_output @ F.dequantize_4bit(B, ctx.state)...``), one linear at a
    time; only a single token's no-grad matmul takes the ``gemv_4bit`` path without it.
    """
    attention, mlp = layer_tensors(arch, layer, p.tensor, p.expert)
    top_a, top_m = 2.0 * max(attention[:4]), 2.0 * max(mlp[:-1] or mlp)
    return msgspec.structs.replace(
        cost,
        mlp_backward=cost.mlp_backward + top_m,
        attention_backward=cost.attention_backward + top_a,
        forward_peak=cost.forward_peak + (0.0 if single_token else max(top_a, top_m)),
    )


def _loading(states: ModelStates, arch: Architecture, counts: ParameterCount, w: Workload) -> float:
    """Bytes a bitsandbytes 4-bit model holds while loading from a 16-bit checkpoint.

    transformers' quantizer copies each weight to the GPU in 16-bit and quantizes it
    there (quantizer_bnb_4bit.py at d91fa5a: "load 16bit weight and pass to the layer
    object; after: quantizes individual weights in Linear4bit into 4bit at the first
    .cuda() call"): at the last, largest weight every other one is already 4-bit, and
    ``quantize_4bit`` adds the fp32 absmax of its blocks.
    """
    p = w.parallelism
    attention, mlp = layer_tensors(arch, counts.layers[-1], p.tensor, p.expert)
    largest = max(*attention, *mlp)
    return states.weights + 2.0 * largest + 4.0 * largest / 64


def _training(
    arch: Architecture,
    *,
    counts: ParameterCount,
    d: Dims,
    num: Numerics,
    w: Workload,
    states: ModelStates,
    costs: list[LayerCost],
    assumptions: list[str],
) -> Peak:
    p = w.parallelism
    lora = w.mode in ("finetune_lora", "finetune_qlora")
    head = head_cost(
        arch,
        d,
        num,
        training=True,
        head_trains=not lora,
        fused=w.fused_kernels,
        megatron=framework_of(w) == "megatron",
    )
    if w.compile or framework_of(w) == "megatron":
        head = msgspec.structs.replace(head, norm_backward=0.0)  # one fused norm kernel
    if num.amp:
        head = msgspec.structs.replace(
            head,
            final_saved=head.final_saved
            + 2 * (counts.head if arch.classifier else counts.head or counts.embedding) / p.tensor,
        )
    flat = framework_of(w) == "fsdp1"
    per_param = 0.0 if lora else states.gradients / max(states.parameters_local, 1)
    if lora:
        share = states.gradients / max(len(costs), 1) / 2
        # Every layer's adapters alike: one record, shared (records are values).
        one = (
            LayerGrads(mlp=0.0, attention=2 * share)
            if flat
            else LayerGrads(mlp=share, attention=share)
        )
        grads = [one] * len(costs)
    else:
        # One record per kind of layer: the layers of a kind share one LayerParameters.
        kinds_of = distinct(counts.layers)
        # FSDP1 reduce-scatters a layer's flat gradient into its shard once its backward
        # is done: the shard is born at the end (its unsharded gradients are states.reduce*).
        kinds = {
            key: LayerGrads(
                mlp=0.0 if flat else layer.mlp / _split(layer, p) * per_param,
                mlp_last=-1.0 if flat else _last_linear(arch, layer) / _split(layer, p) * per_param,
                attention=(
                    (layer.attention / p.tensor + layer.norms)
                    + (layer.mlp / _split(layer, p) if flat else 0.0)
                )
                * per_param,
            )
            for key, layer in zip(map(id, kinds_of), kinds_of, strict=True)
        }
        grads = list(map(kinds.__getitem__, map(id, counts.layers[: len(costs)])))
    if w.gradient_checkpointing == "selective":
        assumptions.append(
            "selective checkpointing recomputes the attention core (Korthikanti et al.): its s x s tensors are not kept"
        )
    if w.loss_chunks > 1:
        head = _chunked_loss(head, d, num, w.loss_chunks)
    held = _held_outputs(arch, d, num, w, local_layers=len(costs)) if w.keep_outputs else 0.0
    in_backward, in_backward_layer = -1.0, 0.0
    if w.optimizer_in_backward:
        biggest = (
            max(arch.hidden_size, arch.intermediate_size) * (w.lora.rank if w.lora else 16)
            if lora
            else largest_tensor(arch) / p.tensor
        )
        per_state = states.optimizer / max(states.trainable, 1) if lora else 0.0
        if not lora:
            per_state = states.optimizer / max(states.parameters_local, 1)
        # One tensor's gradient and its step's temporary at a time; inside a layer's
        # backward, one of the layer's.
        in_backward = biggest * ((per_param or 4.0) + per_state)
        in_layer = biggest if lora else largest_layer_tensor(arch) / p.tensor
        in_backward_layer = in_layer * ((per_param or 4.0) + per_state)
    moment = training_peak(
        states,
        costs,
        grads,
        head,
        checkpointing=w.gradient_checkpointing,
        every=w.checkpoint_every_n_layers,
        accumulation_steps=w.gradient_accumulation_steps,
        in_flight=in_flight(p, w.gradient_accumulation_steps),
        residual_grad=num.residual * d.hidden,
        # FSDP1's root unit reduces its gradient once, at the end of the backward: until
        # then the head's is unsharded (states.root_gradient), and no shard exists.
        head_grads=0.0
        if lora or flat
        else (counts.head if arch.classifier else counts.head or counts.embedding)
        / p.tensor
        * per_param,
        tied_embedding_grad=counts.embedding / p.tensor * per_param
        if arch.tie_word_embeddings and not arch.classifier and not flat
        else 0.0,
        held=held,
        offload_layers=offloaded_layers(w, len(costs)),
        in_backward=in_backward,
        in_backward_layer=in_backward_layer,
        # Megatron-core allocates its gradient buffer once, when the model is wrapped
        # (megatron/core/distributed/param_and_grad_buffer.py), and zeroes it each step.
        # FSDP1's no_sync() keeps every trainable unit's unsharded flat gradient, into
        # which each micro-batch's concatenated gradient is added (states.reduce).
        persistent_gradients=framework_of(w) == "megatron" or (flat and fsdp1.without_sync(w)),
    )
    gap = allocator_gap(
        training_pattern(
            _replay_step(arch, counts, d=d, num=num, w=w, states=states),
            # The first layer that saves the most (each kind of layer looked at once).
            max(distinct(costs), key=attrgetter("saved")),
            head,
            checkpointing=w.gradient_checkpointing,
            accumulation=w.gradient_accumulation_steps,
        )
    )
    ddp = states.gradients if p.data > 1 and p.zero_stage == 0 and framework_of(w) == "ddp" else 0.0
    if ddp:
        assumptions.append(
            "DDP keeps flat gradient buckets beside the gradients (gradient_as_bucket_view=False)"
        )
    return Peak(
        gradients=moment.gradients,
        activations=moment.activations,
        temporary=moment.temporary + ddp,
        kv_cache=0.0,
        phase=moment.phase,
        allocator_gap=float(gap),
    )


def _inference(
    arch: Architecture,
    *,
    d: Dims,
    num: Numerics,
    w: Workload,
    costs: list[LayerCost],
    assumptions: list[str],
    states: ModelStates,
    replay: ReplayStep,
) -> Peak:
    p = w.parallelism
    kv_dtype = (
        w.kv_cache_dtype
        if w.kv_cache_dtype != "auto"
        else ("fp32" if w.precision == "fp32" else "bf16")
    )
    per_token = kv_bytes_per_token(arch, DTYPE_BYTES[kv_dtype], p.tensor)
    widest = max(costs, key=lambda c: c.forward_peak)
    peak = inference_peak(
        arch,
        d,
        widest,
        local_layers=len(costs),
        kv_per_token=per_token,
        max_new_tokens=w.max_new_tokens,
        tuple_per_step=w.kv_cache_layout == "tuple_per_step",
        matmul_bytes=num.matmul,
        mask_bytes=mask_bytes(arch, num.matmul, eager=w.attention == "eager", cpu=num.cpu),
    )
    assumptions.append(
        f"KV cache: {per_token * len(costs) / 1024:.1f} KiB per token on this GPU ({kv_dtype})"
    )
    if quantization_load(w) == "per_weight":
        loading = _loading(states, arch, replay.counts, w) - states.weights
        total = peak.alive()
        if loading > total:
            peak = msgspec.structs.replace(
                peak, kv_cache=0.0, activations=0.0, temporary=loading, phase="loading (quantizing)"
            )
    gap = allocator_gap(
        inference_pattern(
            replay,
            widest,
            kv_per_layer=peak.kv_cache / max(len(costs), 1),
            last_logits=num.matmul
            * d.batch
            * (arch.num_labels if arch.classifier else arch.vocab_size),
        )
    )
    peak = msgspec.structs.replace(peak, allocator_gap=float(gap))
    if replay.quantize_steps:
        peak = _after_full_load(peak, arch, replay, w=w, states=states, widest=widest)
    return peak


def _after_full_load(
    peak: Peak,
    arch: Architecture,
    replay: ReplayStep,
    *,
    w: Workload,
    states: ModelStates,
    widest: LayerCost,
) -> Peak:
    """torchao's quantization after a full 16-bit load (:mod:`.torchao`): its moment.

    Allocated: the worst moment of the quantization (:func:`torchao.loading_peak`).
    Reserved: the 16-bit model's blocks, never returned, plus the segments the
    quantization's temporaries add (:func:`quantization_reserve`); the run that
    follows reuses those cached blocks, so the job's reserve is the larger of the
    two moments' (a run whose tensors outgrow the freed blocks is priced as its own).
    """
    p = w.parallelism
    stored = replay.weight_bytes
    attention, mlp = layer_tensors(arch, replay.counts.layers[-1], p.tensor, p.expert)
    head = replay.counts.head // p.tensor if replay.head_quantized else 0
    elements = layer_parameters_local(arch, replay.counts, w) + head
    loading = torchao.loading_peak(
        weights=states.weights,
        quantized_elements=elements,
        largest_layer_elements=max(*attention, *mlp),
        head_elements=head,
        compute_bytes=replay.compute_bytes,
        stored_bytes=stored,
        steps=replay.quantize_steps,
    )
    full = states.weights + elements * (replay.compute_bytes - stored)
    growth = quantization_reserve(
        inference_pattern(replay, widest, kv_per_layer=0.0, last_logits=0.0)
    )
    reserved = max(full + growth, states.weights + peak.alive() + peak.allocator_gap)
    if loading > states.weights + peak.alive():
        return Peak(
            gradients=0.0,
            activations=0.0,
            kv_cache=0.0,
            temporary=loading - states.weights,
            phase="loading (quantizing the 16-bit model)",
            allocator_gap=reserved - loading,
        )
    return msgspec.structs.replace(peak, allocator_gap=reserved - states.weights - peak.alive())


def _replay_step(
    arch: Architecture,
    counts: ParameterCount,
    *,
    d: Dims,
    num: Numerics,
    w: Workload,
    states: ModelStates,
) -> ReplayStep:
    """What the allocator replay needs to know, in per-parameter bytes."""
    p = w.parallelism
    local = max(states.parameters_local, 1)
    lora = w.mode in ("finetune_lora", "finetune_qlora")
    adapters: tuple[int, ...] = ()
    if lora:
        rank = w.lora.rank if w.lora else 16
        targets, _ = lora_targets(arch, w.lora.target_modules if w.lora else None)
        adapters = tuple(
            n
            for name, m in linear_modules(arch).items()
            if name in targets and m.per_layer
            for _ in range(m.per_layer)
            for n in (rank * m.in_features, rank * m.out_features)
        )
    states_count = {"adamw": 2, "adam": 2, "sgd_momentum": 1, "lion": 1}.get(w.optimizer, 0)
    compute = 4.0 if w.precision == "fp32" else 2.0
    quantized = quantization_of(w)
    stored = quantized_bytes(quantized, double_quantization=w.double_quantization)
    plain = compute if lora else states.weights / local
    return ReplayStep(
        arch=arch,
        counts=counts,
        d=d,
        num=num,
        tp=p.tensor,
        ep=p.expert,
        weight_bytes=stored if quantized != "none" else plain,
        outer_weight_bytes=compute if quantized != "none" else plain,
        load_bytes=2.0 if quantization_load(w) == "per_weight" else 0.0,
        grad_bytes=0.0 if lora else states.gradients / local,
        state_bytes=states.optimizer / max(states.trainable / (p.tensor * p.pipeline), 1)
        if lora
        else states.optimizer / local,
        states=states_count,
        foreach=w.optimizer in ("adamw", "adam") and not num.cpu,
        adapters=adapters,
        quantize_steps=torchao.quantize_steps(quantized, compute_bytes=compute, stored_bytes=stored)
        if quantization_load(w) == "after_full_load"
        else (),
        compute_bytes=compute,
        head_quantized=w.quantize_lm_head and quantized != "none",
    )


def _trainable(arch: Architecture, w: Workload) -> Trainable:
    if w.mode not in ("finetune_lora", "finetune_qlora"):
        return Trainable()
    lora = w.lora
    # FSDP1 adapters inside their layer's flat parameter: every view of it requires grad
    # (so each base linear keeps its input), and they share the base's dtype (no upcast).
    shared = framework_of(w) == "fsdp1" and fsdp1.adapters_in_layers(w)
    # FSDP1's mixed precision gathers a half-precision base while the adapters' own
    # units keep fp32 flat parameters: PEFT upcasts each adapter's input, and autocast
    # casts it back inside the adapter (Trainable.recast).
    recast = (
        not shared
        and framework_of(w) == "fsdp1"
        and w.precision.startswith("amp_")
        and fsdp1.param_dtype(w) != "fp32"
    )
    return Trainable(
        full=False,
        lora_rank=lora.rank if lora else 16,
        adapted=lora_targets(arch, lora.target_modules if lora else None)[0],
        # NeMo's LoRA adapters on Megatron-core compute in the model's dtype (no PEFT
        # upcast); QLoRA's dequantized base keeps PEFT's count.
        upcast=not shared
        and (
            w.mode == "finetune_qlora"
            or (framework_of(w) != "megatron" and (w.precision in ("fp16", "bf16") or recast))
        ),
        recast=recast,
        dropout=bool(lora and lora.dropout > 0),
        base_grads=shared,
    )


def _last_linear(arch: Architecture, layer: LayerParameters) -> float:
    """Parameters of the MLP's last linear (down_proj, c_proj, fc2; the routed experts'
    down projection): the one MLP gradient born before the activation's backward."""
    return layer.mlp / (3 if arch.mlp_gated or _is_moe(layer) else 2)


def _is_moe(layer: LayerParameters) -> bool:
    return layer.mlp != layer.active_mlp


def _split(layer: LayerParameters, p: Parallelism) -> int:
    """How many GPUs share one layer's MLP weights."""
    return p.tensor * (p.expert if _is_moe(layer) else 1)


def _scaled(counts: ParameterCount, total: int) -> ParameterCount:
    factor = total / max(counts.total, 1)
    layers = [
        LayerParameters(
            attention=round(lp.attention * factor),
            mlp=round(lp.mlp * factor),
            norms=lp.norms,
            active_mlp=round(lp.active_mlp * factor),
        )
        for lp in counts.layers
    ]
    return ParameterCount(
        total=total,
        embedding=round(counts.embedding * factor),
        head=round(counts.head * factor),
        final=counts.final,
        layers=layers,
    )


def offloaded_layers(w: Workload, local_layers: int) -> int:
    """How many of the GPU's layers, the first ones, offload their saved activations:
    ``activation_offload_layers``, else every layer under ``activation_offload``."""
    if w.activation_offload_layers > 0:
        return min(w.activation_offload_layers, local_layers)
    return local_layers if w.activation_offload else 0


def in_flight(p: Parallelism, micro_batches: int) -> float:
    """Micro-batches whose activations the first pipeline stage holds at once, in whole
    stages' worth.

    GPipe runs every forward before any backward: all of them. 1F1B starts a backward as
    soon as the last stage can: the pipeline depth at most. Interleaving ``v`` chunks per
    stage holds ``1 + (p - 1) / (p v)`` times that (Megatron-LM's
    ``interleaved_schedule_memory_penalty``, megatron/training/theoretical_memory_usage.py,
    which scales the activations by it). It is exact, not rounded: the first stage runs
    ``2 (p - 1) + (v - 1) p`` warm-up chunks and one more forward before its first
    backward (NVIDIA/Megatron-LM megatron/core/pipeline_parallel/schedules.py at d98e8a64dd,
    ``get_pp_rank_microbatches``, with its default ``microbatch_group_size_per_vp_stage``
    of ``p``), ``p v + p - 1`` chunks of ``1 / v``
    of its layers: ``p + (p - 1) / v`` stages' worth. (The file's ``math.ceil`` of it is
    ``in_flight_microbatches``, a count it prints, not the factor it applies; rounding up
    held a whole stage more at ``p = 2, v = 24``: 3 for 2.04.) Never more than every
    chunk of every micro-batch."""
    if p.pipeline <= 1:
        return 1.0
    if p.pipeline_schedule == "gpipe":
        return float(micro_batches)
    if p.virtual_stages > 1:
        penalty = 1 + (p.pipeline - 1) / (p.pipeline * p.virtual_stages)
        return min(penalty * p.pipeline, float(micro_batches))
    return float(min(p.pipeline, micro_batches))
