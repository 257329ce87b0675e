"""Model states on one GPU: weights, gradients, optimizer states and master weights.

The per-parameter byte counts are the ZeRO paper's (Rajbhandari et al. 2020) with the
framework conventions spelled out: PyTorch AMP trains fp32 weights (which are their
own master copy), so AdamW costs 4 + 4 + 8 = 16 B/param; DeepSpeed and FSDP mixed
precision keep half-precision weights and gradients beside an fp32 master, 2 + 2 + 4
+ 8 = 16 B/param, which ZeRO stages then shard over the data-parallel group.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.modules import lora_parameters, lora_targets
from gpuplan.core.memory.parameters import LayerParameters, ParameterCount
from gpuplan.core.memory.schema import Workload
from gpuplan.core.record import Record

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


def quantization_of(w: Workload) -> str:
    """The stored format of the linear layers' weights (``none``: the compute dtype)."""
    if w.mode == "finetune_qlora":
        return "nf4" if w.weight_quantization == "none" else w.weight_quantization
    return w.weight_quantization if w.mode == "inference" else "none"


def bnb_4bit(w: Workload) -> bool:
    """bitsandbytes 4-bit weights, which dequantize per matmul and load via 16-bit."""
    return quantization_of(w) in ("nf4", "fp4")


class ModelStates(Record, kw_only=True):
    parameters_local: int
    """Parameters held by this GPU (after tensor, pipeline and expert splits)."""

    trainable: int
    """Trainable parameters of the whole model."""

    weights: float
    gradients: float
    optimizer: float
    master: float
    optimizer_temporary: float
    """Extra bytes inside ``optimizer.step()``."""

    gather: float
    """ZeRO-3 / FSDP all-gather buffers for the layers being computed."""

    largest_layer: float
    """Bytes of the largest layer's weights in compute precision."""


def _local_parameters(arch: Architecture, counts: ParameterCount, w: Workload) -> tuple[int, int]:
    """(parameters on the most loaded GPU, of which in its layers)."""
    p = w.parallelism
    tp, pp, ep = p.tensor, p.pipeline, p.expert
    layers_per_stage = -(-arch.num_layers // pp)
    per_layer = []
    for lp in {id(lp): lp for lp in counts.layers}.values():  # each kind of layer once
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


class _Bytes(Record, kw_only=True):
    """Bytes per parameter of each model state, before any sharding."""

    weights: float
    grads: float
    states: float
    master: float


def _bytes_per_parameter(w: Workload) -> _Bytes:
    """The framework conventions behind the byte counts (see the module docstring)."""
    p = w.parallelism
    training = w.mode != "inference"
    half = 4.0 if w.precision == "fp32" else 2.0
    deepspeed_style = training and (p.zero_stage > 0 or w.precision == "fp8")
    if w.mode in ("finetune_lora", "finetune_qlora"):
        # PEFT keeps adapters in fp32 (autocast_adapter_dtype); the base is frozen.
        return _Bytes(weights=half, grads=4.0, states=4.0, master=0.0)
    if not training:
        return _Bytes(weights=half, grads=0.0, states=0.0, master=0.0)
    if deepspeed_style:
        return _Bytes(weights=half, grads=half, states=4.0, master=4.0 if half == 2 else 0.0)
    # PyTorch: AMP trains fp32 weights; pure precisions keep Adam's moments in the
    # parameter dtype.
    weights = 4.0 if w.precision.startswith("amp_") or w.precision == "fp32" else 2.0
    return _Bytes(weights=weights, grads=weights, states=weights, master=0.0)


def model_states(
    arch: Architecture, counts: ParameterCount, w: Workload, *, runtime: str
) -> ModelStates:
    p = w.parallelism
    dp = p.data
    local, in_layers = _local_parameters(arch, counts, w)
    largest = counts.largest_layer / p.tensor
    training = w.mode != "inference"
    per = _bytes_per_parameter(w)
    compute = 4.0 if w.precision == "fp32" else 2.0
    quantized = quantization_of(w)
    if quantized != "none":
        # Linear weights take the stored format; embeddings, norms and (unless asked)
        # the head stay in the compute dtype (bitsandbytes skips them).
        stored = quantized_bytes(quantized, double_quantization=w.double_quantization)
        head = counts.head / p.tensor if w.quantize_lm_head else 0.0
        weights = (in_layers + head) * stored + (local - in_layers - head) * compute
    else:
        weights = local * per.weights
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
    master = trainable_local * per.master
    temp = (
        _optimizer_temporary(w.optimizer, runtime, trainable_local, biggest, per.states)
        if training
        else 0.0
    )
    if training and p.zero_stage >= 1:
        optimizer, master, temp = optimizer / dp, master / dp, temp / dp
    if training and p.zero_stage >= 2:
        gradients /= dp
    gather = 0.0
    if p.zero_stage >= 3:
        weights /= dp
        gather = 2 * largest * compute  # the layer being computed and the one prefetched
    if p.cpu_offload.optimizer:
        optimizer = master = temp = 0.0
    if p.cpu_offload.parameters and p.zero_stage >= 3:
        weights = 0.0
    return ModelStates(
        parameters_local=local,
        trainable=trainable,
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        master=master,
        optimizer_temporary=temp,
        gather=gather,
        largest_layer=largest * compute,
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
    h = arch.hidden_size
    word = arch.word_embed_dim or h
    candidates = [arch.vocab_size * word, h * arch.intermediate_size, h * arch.q_dim]
    if arch.moe is not None:
        candidates.append(arch.moe.num_experts * 2 * arch.moe.expert_intermediate_size * h)
    return max(candidates)


def _optimizer_states(optimizer: str, state_bytes: float) -> float:
    """Bytes of optimizer state per trainable parameter."""
    if optimizer in ("adamw", "adam"):
        return 2 * state_bytes  # first and second moments
    if optimizer in ("sgd_momentum", "lion"):
        return state_bytes  # one momentum buffer
    if optimizer == "adamw_8bit":
        return 2.0  # bitsandbytes: one byte per moment (block-wise quantized)
    if optimizer == "adafactor":
        return 0.05 * state_bytes  # factored second moment: one row and one column per matrix
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
