"""The time of one training step on a layout: compute, recompute, exposed communication,
pipeline bubble, and the optimizer.

Compute is timed by kind of kernel, each at what the GPU generation delivers of it
(:mod:`gpuplan.core.perf.efficiency`): the model's matmuls at the GEMM efficiency of their
width (hidden size per tensor-parallel rank), attention at the fused-attention efficiency,
the memory-bound kernels at the memory bandwidth, and a launch cost per layer. So a wide
model on an A100 reaches a larger share of its peak than a narrow one on an H100, by the
numbers. The model FLOPs utilization (MFU) of the step is a result: model FLOPs (6N plus
attention, no recomputation) over the step's time and the GPUs' peak.

Recomputation (``gradient_checkpointing``) is timed apart, at the same rates: full
repeats the forward, selective the attention core, ``selective_op`` the memory-bound
kernels (in one layer in ``checkpoint_every_n_layers``). Communication of each kind of
parallelism is timed on its link (:mod:`gpuplan.core.perf.comm`) and what the framework
cannot hide behind compute stays on the critical path. A pipeline idles
``(p − 1) / (v · m)`` of its compute (Narayanan et al. 2021: ``v`` virtual stages,
``m`` micro-batches per step).
"""

import math
from collections.abc import Callable
from functools import lru_cache
from typing import NamedTuple

from gpuplan.core.memory.schema import Parallelism
from gpuplan.core.perf.comm import (
    all_gather_seconds,
    all_reduce_seconds,
    all_to_all_seconds,
    exchange_seconds,
    transfer_seconds,
)
from gpuplan.core.perf.efficiency import Framework, Kernels
from gpuplan.core.perf.flash_attention import flash2_tables
from gpuplan.core.perf.flops import TokenFlops, forward_flops_per_token
from gpuplan.core.perf.kernels import (
    Gemm,
    context_attention_seconds,
    gemm_rate,
    gemm_seconds,
    kernel_tables,
    model_gemms,
)
from gpuplan.core.perf.step_records import Rates, Step, StepLinks, StepShape

FUSED_ATTENTION_BACKWARD_OVER_FORWARD = 3.0
"""Seconds a fused (flash) attention's backward takes per second of its forward.

The backward does more than the model FLOPs' two matmuls per forward one: it recomputes
the scores (``S = QKᵀ``) besides ``dV``, ``dP``, ``dQ`` and ``dK``, five matmuls to the
forward's two (FlashAttention's own count: ``flops(..., mode="bwd") = 2.5 * f``,
Dao-AILab/flash-attention benchmarks/benchmark_flash_attention.py at 0469c72723278048),
and at a lower rate than the forward. Measured, cuDNN's training SDPA in bf16 with the
causal mask, Llama 3.1 shape (64 query heads, 8 KV, head size 128) on H200:
``bwd_time_ms / fwd_time_ms`` = 1.450 / 0.465, 5.083 / 1.708, 19.002 / 6.531 and
75.688 / 25.566 at 4K, 8K, 16K and 32K tokens, 3.12, 2.98, 2.91 and 2.96
(NVIDIA/cudnn-frontend, benchmark/sdpa_benchmark_training/results/h200_919_only_cudnn/
llama3.1_20260227_034703.csv at df73764adb98, cuDNN 9.19); GB200 and GB300 measure 2.95
to 3.41 (results/llama3.1/gb200 and gb300 of the same repository). The measured prefill
tables time the forward only (:func:`_measured_attention_seconds`)."""


def gemm_efficiency(r: Rates, width: float, tokens: float) -> float:
    """The share of the peak a GEMM of ``width`` (hidden size per tensor-parallel rank)
    over ``tokens`` rows reaches: the plateau, less where either dimension is too small
    to fill the GPU's tiles and waves (``x / (x + half)`` in each). A model of unknown
    width (a bare parameter count, a vision preset) is taken at the plateau's width."""
    tall = 1.0 if math.isinf(tokens) else tokens / (tokens + r.kernels.gemm_half_tokens)
    return wide_gemm_efficiency(r, width) * tall


def wide_gemm_efficiency(r: Rates, width: float) -> float:
    """:func:`gemm_efficiency` of a GEMM with rows enough to fill the GPU: the plateau,
    less where ``width`` is too small (a caller that times many row counts of one width,
    a serving replica's steps, computes it once)."""
    wide = width / (width + r.kernels.gemm_half_width) if width > 0 else 1.0
    return gemm_plateau(r) * wide


def gemm_plateau(r: Rates) -> float:
    """The share of the peak the widest GEMMs reach: the generation's plateau, or one
    anchored to the card's (or the live fleet's) measured matmul rate, a kernel timed
    alone, at the share of it a step realizes (``kernels.measured_kernel_share``, as for
    a measured kernel table)."""
    if r.measured_peak:
        return r.kernels.measured_kernel_share * r.vision_factor
    gen = r.generation
    plateau = (gen.fp8_gemm_efficiency if r.fp8 else gen.gemm_efficiency) * r.vision_factor
    if gen.measured_plateau:
        plateau *= r.kernels.measured_kernel_share
    return plateau


class MicroBatch(NamedTuple):
    """One micro-batch on one GPU: its model FLOPs and where its time goes."""

    model_flops: float
    gemm_s: float
    attention_s: float
    elementwise_s: float
    launch_s: float
    forward_gemm_share: float = 1 / 3
    """Share of the GEMM time that is forward: 2N of 6N, or 2N of 4N with a frozen base
    (LoRA computes no weight gradients for it)."""

    measured: bool = False
    """The GEMMs (and fused attention) were timed from a measured kernel table."""

    attention_forward_share: float = 1 / 3
    """Share of the attention time that is forward: a third by the model FLOPs (eager
    attention), ``1 / (1 + FUSED_ATTENTION_BACKWARD_OVER_FORWARD)`` for a fused kernel,
    whose backward recomputes the scores."""

    @property
    def compute_s(self) -> float:
        return self.gemm_s + self.attention_s + self.elementwise_s + self.launch_s

    @property
    def backward_s(self) -> float:
        return self.compute_s - self.forward_s

    @property
    def forward_s(self) -> float:
        """The forward: its GEMMs, attention's forward share, and a third of the
        memory-bound kernels and launches."""
        rest = self.elementwise_s + self.launch_s
        return (
            self.gemm_s * self.forward_gemm_share
            + self.attention_s * self.attention_forward_share
            + rest / 3
        )

    def recompute_s(self, checkpointing: str, every: int = 1) -> float:
        """Full repeats the forward; selective the attention core's forward;
        ``selective_op`` (torchtitan's operator policy, which keeps every matmul's and
        attention's output) the rest of the forward: its memory-bound kernels. With one
        layer in ``every`` checkpointed, a share of that."""
        if checkpointing == "full":
            return self.forward_s / every
        if checkpointing == "selective":
            return self.attention_s * self.attention_forward_share
        if checkpointing == "selective_op":
            return (self.elementwise_s + self.launch_s) / 3 / every
        return 0.0


def micro_batch(
    t: TokenFlops,
    shape: StepShape,
    lay: Parallelism,
    rates: Rates,
    framework: Framework,
    *,
    shape_share: Callable[[StepShape, Parallelism, float, bool], float] | None = None,
    traffic_of: Callable[[], float] | None = None,
) -> MicroBatch:
    """The compute of one micro-batch on one GPU, by kind of kernel.

    ``shape_share``: :func:`reference_shape_share`, or a memo of it from a caller that
    times the same micro-batch on many GPUs without a kernel table (it does not depend
    on the GPU). ``traffic_of``: the micro-batch's memory-bound bytes
    (:func:`step_traffic_bytes` of it), from a caller that times it on many GPUs (the
    bytes do not depend on the GPU, only their time does)."""
    # One GPU's share of a micro-batch: context parallelism splits the sequence, tensor
    # parallelism the width, pipeline parallelism the layers.
    local_tokens = shape.batch_size * shape.seq / lay.context
    shard = lay.tensor * lay.pipeline
    layers = -(-shape.num_layers // lay.pipeline)
    per_weight = (4 if shape.frozen_base else 6) * local_tokens / lay.tensor
    weights = per_weight * t.matmul_parameters / lay.pipeline
    # The GPU that sets the pace: the last pipeline stage, which also holds the head.
    stage_weights = per_weight * last_stage_parameters(t, shape, lay)
    full = forward_flops_per_token(t, shape.seq, causal_skip=shape.causal_skip)
    attention = 3 * (full - 2 * t.matmul_parameters) * local_tokens / shard
    forward_share = 1 / 2 if shape.frozen_base else 1 / 3
    if rates.mfu is not None:
        rate = rates.peak_flops * rates.mfu
        return MicroBatch(
            weights + attention, stage_weights / rate, attention / rate, 0.0, 0.0, forward_share
        )
    gen, k = rates.generation, rates.kernels
    measured = rates.kernel_source == "measured" and not shape.vision and shape.hidden_size > 0
    if measured:
        gemm = stage_weights / _measured_gemm_rate(shape, lay, rates, local_tokens)
    elif not shape.vision and shape.hidden_size > 0:
        gemm = stage_weights / (
            rates.peak_flops
            * gemm_plateau(rates)
            * (shape_share or reference_shape_share)(shape, lay, local_tokens, rates.fp8)
        )
    else:
        gemm = stage_weights / (
            rates.peak_flops
            * gemm_efficiency(
                # A convolution's GEMM rows are the batch times every output pixel.
                rates,
                shape.hidden_size / lay.tensor,
                math.inf if shape.vision else local_tokens,
            )
        )
    fused = measured and shape.causal_skip and shape.head_dim > 0 and attention > 0
    attention_forward = 1 / (1 + FUSED_ATTENTION_BACKWARD_OVER_FORWARD)
    flash2 = _flash2_seconds(shape, lay, rates, layers) if fused and shape.flash2 else None
    timed = (
        _measured_attention_seconds(shape, lay, rates, layers) if fused and flash2 is None else None
    )
    if flash2 is not None:
        attention_s, attention_forward = flash2
    elif timed is not None:
        attention_s = timed
    else:
        attention_s = attention / (rates.attention_peak_flops * gen.attention_efficiency)
    if traffic_of is not None:
        traffic = traffic_of()
    else:
        traffic = step_traffic_bytes(shape, lay, k=k, framework=framework)
    adapter_gemm, adapter_bytes = adapter_work(
        shape, lay, rates, local_tokens, peft=framework.name != "megatron"
    )
    gemm += adapter_gemm
    traffic += adapter_bytes
    launch = layers * k.layer_overhead_seconds
    if shape.compile:
        launch *= k.compile_elementwise_factor  # fused kernels are fewer launches too
    elementwise = traffic / (rates.bandwidth_bytes_per_s * gen.bandwidth_efficiency)
    return MicroBatch(
        weights + attention,
        gemm,
        attention_s,
        elementwise,
        launch,
        forward_share,
        measured,
        attention_forward if shape.causal_skip else 1 / 3,
    )


def step_traffic_bytes(
    shape: StepShape, lay: Parallelism, *, k: Kernels, framework: Framework
) -> float:
    """The memory-bound bytes of one micro-batch on one GPU but the adapters': the fused
    kernels' (``workload.fused_kernels``) or the eager layers' (:func:`layer_traffic_bytes`),
    and with eager or math attention every score written and read."""
    if shape.vision:
        return 0.0
    tokens = shape.batch_size * shape.seq / lay.context
    layers = -(-shape.num_layers // lay.pipeline)
    if shape.fused_kernels:
        traffic = fused_traffic_bytes(shape, lay, tokens, layers)
    else:
        traffic = layer_traffic_bytes(shape, lay, tokens, layers, k=k, framework=framework)
    if not shape.causal_skip:
        # Eager attention and SDPA's math kernel write and read every score: heads x
        # keys per token.
        scores = tokens * layers * shape.num_heads / lay.tensor * shape.seq
        per_score = (
            AUTOCAST_SCORE_BYTES
            if shape.autocast
            else k.eager_score_bytes * shape.activation_bytes / 2
        )
        traffic += scores * per_score
    return traffic


def eager_layer_bytes(hidden: int, kv_width: int, mlp_width: int, k: Kernels) -> float:
    """Bytes an eager layer's memory-bound kernels move per token, forward and
    backward, in 16-bit activations: counted per unit of hidden size, key/value width
    (the hidden size where unknown) and MLP width (``kernels.eager_*_bytes``,
    ``python -m bench.kernels.eager_bytes``)."""
    kv = kv_width if kv_width > 0 else hidden
    return hidden * k.eager_hidden_bytes + kv * k.eager_kv_bytes + mlp_width * k.eager_mlp_bytes


def layer_traffic_bytes(
    shape: StepShape,
    lay: Parallelism,
    tokens: float,
    layers: int,
    *,
    k: Kernels,
    framework: Framework,
) -> float:
    """The memory-bound bytes of one micro-batch on one GPU outside fused attention: the
    layers' norms, activations and residual adds (:func:`eager_layer_bytes`, less what
    the framework's or ``torch.compile``'s fusion leaves out), the loss over the logits
    on the last stage (the one that sets the pace), and the routed experts' dispatch."""
    per_token = eager_layer_bytes(shape.hidden_size, shape.kv_width, shape.mlp_width, k)
    traffic = tokens * layers / lay.tensor * per_token
    logits = tokens * shape.vocab_size / lay.tensor
    scale = shape.activation_bytes / 2
    if shape.compile:
        traffic *= k.compile_elementwise_factor
        traffic += logits * COMPILED_LOSS_BYTES_PER_LOGIT
    else:
        traffic += logits * LOSS_BYTES_PER_LOGIT
    traffic *= scale * framework.elementwise_factor
    return traffic + routed_traffic_bytes(shape, lay, tokens)


def last_stage_parameters(t: TokenFlops, shape: StepShape, lay: Parallelism) -> float:
    """Matmul weights a token multiplies on the last pipeline stage: its share of the
    layers and the whole output head.

    Megatron-core builds the output layer on the last stage only (NVIDIA/Megatron-LM,
    megatron/core/models/gpt/gpt_model.py at e914fb787a46: ``if post_process:
    self.output_layer = tensor_parallel.ColumnParallelLinear(config.hidden_size,
    self.vocab_size, ...)``) and splits the decoder's layers evenly over the stages (the
    later ``account_for_embedding_in_pipeline_split`` / ``account_for_loss_in_pipeline_split``
    options, which count them as a layer, default to False). In the steady state of
    1F1B every stage runs each micro-batch once and waits for the slowest, so a
    micro-batch slot takes the last stage's time: the head's GEMMs are not spread over
    the stages. Without pipeline parallelism (or an unknown head) this is the model's
    matmul weights."""
    head = float(shape.vocab_size * shape.hidden_size) if shape.vocab_size > 0 else 0.0
    if lay.pipeline <= 1 or head <= 0 or head >= t.matmul_parameters:
        return t.matmul_parameters / lay.pipeline
    return (t.matmul_parameters - head) / lay.pipeline + head


LOSS_BYTES_PER_LOGIT = 48
"""Bytes the cross-entropy loss moves per 16-bit logit, forward and backward, unfused.
``cross_entropy`` autocasts to fp32 (pytorch/pytorch, docs/source/amp.rst at
e4b13f681dc1: "CUDA Ops that can autocast to ``float32``: ... ``cross_entropy`` ...
``log_softmax`` ... ``nll_loss``"), so eagerly: the cast up (read 2, write 4),
``log_softmax`` (three reads of the row, for its max, its sum of exponentials and the
output, and a write: 16), ``nll_loss``'s backward writing a zeroed gradient (4), the
softmax backward (a read of the gradient for its sum, then the gradient and the output
read and the input's gradient written: 16) and the cast back (read 4, write 2). The
vocabulary is wide (32k to 150k logits a token against a few thousand hidden), so these
passes are a real share of a small model's step. A framework's fused loss (Megatron's
``cross_entropy_loss_fusion``) is scaled by its ``elementwise_factor``;
``torch.compile``'s is counted apart (:data:`COMPILED_LOSS_BYTES_PER_LOGIT`)."""


COMPILED_LOSS_BYTES_PER_LOGIT = 8
"""Bytes per 16-bit logit the cross-entropy loss moves under ``torch.compile``, forward
and backward. Inductor lowers ``cross_entropy`` (autocast's fp32 cast, ``log_softmax``,
``nll_loss``) to per-row reductions and fuses the casts and the exponentials into them:
"There are four ops that are lowered from the ``torch.nn.CrossEntropyLoss()``", the
row's maximum (``op0.writes = [MemoryDep('buf0', c0, {c0: 3})]``, one value a row), its
sum of exponentials (``buf1``, one a row, reading ``buf0``), then the scalar loss
(pytorch/pytorch issue #153346, 2025-05-11); the ``[tokens, vocabulary]`` log-probabilities
are not written ("torch.compile is able to optimize away this memory allocation",
allenai/open-instruct PR #584, for the same ``log_softmax`` and gather). So the forward
reads the 16-bit row twice, once for each reduction (4); the backward, ``softmax - onehot``
recomputed from the row and its two saved values and cast back to 16 bits, is one
pointwise kernel that reads the row and writes its gradient (4). Eagerly
:data:`LOSS_BYTES_PER_LOGIT`; the layers' traffic keeps the fitted
``kernels.compile_elementwise_factor``."""


FUSED_NORM_BYTES = 30
"""Bytes per hidden element one of flash-attention's fused dropout-add-LayerNorms moves
(Dao-AILab/flash-attention, flash_attn/modules/block.py and flash_attn/ops/layer_norm.py
at 0b037c2d96ab; ``dropout_add_layer_norm(..., prenorm=True, residual_in_fp32=True)``):
forward, the sublayer's 16-bit output and the fp32 residual read (2 + 4), the normed
16-bit input of the next sublayer, the new fp32 residual and a byte of dropout mask
written (2 + 4 + 1): 13; backward, the normed input's gradient, the residual's fp32
gradient, the saved fp32 residual and the mask read (2 + 4 + 4 + 1), the sublayer
output's and the residual's gradients written (2 + 4): 17. Two a layer."""

FUSED_MLP_BYTES = 4
"""Bytes per MLP element flash-attention's ``FusedMLP`` (flash_attn/ops/fused_dense.py at
0b037c2d96ab, ``checkpoint_lvl`` 0) moves outside its GEMMs: the GELU runs in the first
GEMM's epilogue, which also writes the 16-bit pre-activation (2), and its gradient in the
epilogue of the second GEMM's input-gradient GEMM, which reads it back (2). The biases
of ``fused_bias_fc`` are epilogues too; the attention reads its packed q, k, v in place."""

FUSED_LOSS_BYTES_PER_LOGIT = 8
"""Bytes per 16-bit logit of flash-attention's cross-entropy (flash_attn/losses/
cross_entropy.py at 0b037c2d96ab: apex's ``xentropy`` kernels; the training config's
``inplace_backward: True``): the forward reads the row twice, for its maximum and then
its sum of exponentials (4); the backward reads it and writes its gradient in place (4)."""


def fused_traffic_bytes(shape: StepShape, lay: Parallelism, tokens: float, layers: int) -> float:
    """The memory-bound bytes of one micro-batch of flash-attention's fused GPT on one
    GPU: two fused norms and the MLP's epilogue traffic a layer, and the fused loss."""
    per_token = layers * (
        2 * FUSED_NORM_BYTES * shape.hidden_size + FUSED_MLP_BYTES * shape.mlp_width
    )
    per_token += shape.vocab_size * FUSED_LOSS_BYTES_PER_LOGIT
    return tokens * per_token / lay.tensor * shape.activation_bytes / 2


AUTOCAST_SCORE_BYTES = 72
"""Bytes eager attention moves per score under ``torch.autocast`` (16-bit matmuls),
forward and backward, counted from the written-out attention of karpathy/build-nanogpt
train_gpt2.py at 177e4cd (``att = (q @ k.transpose(-2, -1)) * scale``,
``att.masked_fill(mask == 0, -inf)``, ``F.softmax(att, dim=-1)``, ``y = att @ v``).
``softmax`` is on autocast's float32 list (pytorch/pytorch, docs/source/amp.rst at
e4b13f681dc1: "CUDA Ops that can autocast to ``float32``: ... ``softmax``") and ``@`` on
its lower-precision list, so each runs on a cast copy. Forward: the scores written (2),
the scale (read and write: 4), the mask (4), the cast up (read 2, write 4), the softmax
(read 4, write 4), the cast down (read 4, write 2) and its read by ``@ v`` (2): 32.
Backward: the probabilities' gradient written and the probabilities read for ``v``'s
(4), the cast's gradient up (6), the softmax backward (gradient and output read, input
gradient written: 12), the cast's gradient down (6), the mask's and the scale's (4
each) and the scores' gradient read by the two matmuls (4): 40. Megatron's fused
scale-mask-softmax in 16-bit moves ``kernels.eager_score_bytes`` instead."""


ADAPTER_INPUT_BYTES = 6
"""Bytes per 16-bit input element of an adapted linear that PEFT's LoRA moves outside its
GEMMs: the backward adds the adapter's input gradient to the base layer's (read two,
write one)."""

DROPOUT_INPUT_BYTES = 10
"""With ``lora_dropout`` above 0, per input element: ``nn.Dropout`` reads the input and
writes its output and a 1-byte mask forward (5), and its backward reads the gradient and
the mask and writes the input's gradient (5)."""

ADAPTER_OUTPUT_BYTES = 14
"""Per 16-bit output element of an adapted linear: ``* scaling`` (read, write) and the
add to the base output (read two, write one) forward, and ``* scaling`` on the gradient
backward (read, write); the add's backward passes the gradient through."""


def adapter_work(
    shape: StepShape, lay: Parallelism, rates: Rates, tokens: float, *, peft: bool = True
) -> tuple[float, float]:
    """LoRA's adapters in one micro-batch on one GPU: (GEMM seconds, elementwise bytes).

    PEFT's ``Linear.forward`` (huggingface/peft, src/peft/tuners/lora/layer.py at
    b28a09c44695; the same expression since v0.7) runs, beside each frozen base linear, ``result = result +
    lora_B(lora_A(dropout(x))) * scaling``: two GEMMs of rank ``r`` (``x`` of ``in``
    features down to ``r``, then up to ``out``), each trained, so forward, input
    gradient and weight gradient, and unfused elementwise passes over the input and
    output (the ``*_BYTES`` constants above, counted from that code). The GEMMs are
    far too narrow to reach the GPU's FLOP rate: a measured kernel table times them at
    their shapes (rank below the table's smallest width at its edge's time, the latency
    floor of a memory-bound GEMM), the roofline model at the efficiency of their width.
    ``peft`` False (Megatron: NeMo's and Megatron-Bridge's own adapter modules, whose
    elementwise kernels were not counted from their source): the GEMMs alone."""
    if not shape.adapters or shape.adapter_rank <= 0 or tokens <= 0:
        return 0.0, 0.0
    layers = -(-shape.num_layers // lay.pipeline)
    r = float(shape.adapter_rank)
    gemms, element = _adapter_shapes(
        shape.adapters, r, layers, lay.tensor, dropout=shape.adapter_dropout
    )
    flops = sum(c * 2 * 3 * tokens * n * k for c, n, k in gemms)
    if rates.mfu is not None:
        seconds = flops / (rates.peak_flops * rates.mfu)
    elif rates.kernel_source == "measured":
        assert rates.kernel_table is not None
        dtype = "fp8" if rates.fp8 else "bf16"
        rate = gemm_rate(
            rates.kernel_table, "bf16" if dtype == "fp8" else dtype, max(round(tokens), 1), gemms, 2
        )
        seconds = flops / (rate * rates.kernels.measured_kernel_share)
    else:
        seconds = flops / (rates.peak_flops * gemm_efficiency(rates, r, tokens))
    if not peft:
        return seconds, 0.0
    traffic = tokens * layers * element * shape.activation_bytes / 2
    return seconds, traffic


@lru_cache(maxsize=1024)
def _adapter_shapes(
    adapters: tuple[tuple[int, int, int, bool], ...],
    r: float,
    layers: int,
    t: int,
    *,
    dropout: bool,
) -> tuple[tuple[tuple[float, float, float], ...], float]:
    """(the adapters' GEMMs on one GPU, their elementwise bytes per token and layer) for
    :func:`adapter_work`: what does not depend on the micro-batch's tokens (memoized: a
    search times every layout of every GPU with the same adapters)."""
    local = [
        (count, fan_in / t if row else fan_in, fan_out if row else fan_out / t)
        for count, fan_in, fan_out, row in adapters
    ]
    gemms = tuple(
        g
        for count, fan_in, fan_out in local
        for g in (
            (count * layers, r, float(round(fan_in))),
            (count * layers, float(round(fan_out)), r),
        )
    )
    per_input = ADAPTER_INPUT_BYTES + (DROPOUT_INPUT_BYTES if dropout else 0)
    element = sum(
        count * (fan_in * per_input + fan_out * ADAPTER_OUTPUT_BYTES)
        for count, fan_in, fan_out in local
    )
    return gemms, element


def routed_traffic_bytes(shape: StepShape, lay: Parallelism, tokens: float) -> float:
    """Bytes an MoE model's token permutations move in one micro-batch on one GPU.

    Megatron-core's alltoall token dispatcher (NVIDIA/Megatron-LM,
    megatron/core/transformer/moe/token_dispatcher.py at 0014f13713bf) copies every
    routed token row in separate passes around the experts: ``permute`` (each token's
    ``top_k`` copies, grouped by expert) before the dispatch all-to-all, and
    ``sort_chunks_by_idxs`` after it (by local expert, where a rank holds more than one);
    the combine runs their inverses (``sort_chunks_by_idxs`` back, then ``unpermute``,
    which weighs each copy by its router probability and sums them). Each pass reads and
    writes the routed rows (``tokens · top_k`` of the hidden width, split by tensor
    parallelism), and the backward runs the same passes on the gradients. They are
    memory-bound: timed at the bandwidth, with the other elementwise kernels."""
    if shape.experts <= 0 or shape.moe_layers <= 0 or shape.experts_per_token <= 0:
        return 0.0
    moe = min(-(-shape.moe_layers // lay.pipeline), -(-shape.num_layers // lay.pipeline))
    passes = 4 if shape.experts // max(lay.expert, 1) > 1 else 2
    rows = tokens * shape.experts_per_token * moe
    return rows * shape.hidden_size / lay.tensor * shape.activation_bytes * 2 * 2 * passes


def _measured_gemm_rate(shape: StepShape, lay: Parallelism, rates: Rates, tokens: float) -> float:
    """FLOP/s the model's GEMMs reach on one GPU by the measured table, forward and
    backward (:func:`gpuplan.core.perf.kernels.gemm_rate`: the backward as the forward's
    two transposed GEMMs, the input's gradient only for a frozen base) over ``tokens``
    rows. It is a rate, not a sum of times: every matmul FLOP of the model (unusual
    projections included) runs at the rate of its typical shapes, scaled by the share of
    an isolated kernel's speed a training step realizes (``kernels.measured_kernel_share``,
    fitted: clocks under sustained load, gaps, dispatch). An MoE model's routed experts
    are timed at their own shapes (:func:`expert_gemm_groups`), each group's FLOPs at its
    own rate."""
    table = rates.kernel_table
    assert table is not None
    rate = _table_gemm_rate(table, "fp8" if rates.fp8 else "bf16", shape, lay, tokens)
    assert rate is not None
    return rate * rates.kernels.measured_kernel_share


def _table_gemm_rate(
    table: str, dtype: str, shape: StepShape, lay: Parallelism, tokens: float
) -> float | None:
    """FLOP/s of the model's GEMMs, forward and backward, over ``tokens`` rows on one
    GPU, each group of shapes (:func:`expert_gemm_groups`) at the rate ``table``
    measures for it; None when there is no GEMM work."""
    gradients = 1 if shape.frozen_base else 2
    flops = seconds = 0.0
    for rows, gemms in expert_gemm_groups(shape, lay, tokens):
        work = sum(c * 2 * (1 + gradients) * rows * n * k for c, n, k in gemms)
        if work > 0:
            flops += work
            seconds += work / gemm_rate(table, dtype, rows, gemms, gradients)
    return flops / seconds if flops > 0 else None


REFERENCE_GEMM_TABLE = "a100-sxm4-80gb"
"""The measured kernel table whose shapes time the GEMMs of a GPU that has none
(:func:`reference_shape_share`): the one ``kernels.gemm_half_width`` is measured from."""


def reference_shape_share(shape: StepShape, lay: Parallelism, tokens: float, fp8: bool) -> float:
    """What share of its plateau a GPU without a measured kernel table reaches on the
    model's GEMMs, forward and backward, over ``tokens`` rows: the share the reference
    table (:data:`REFERENCE_GEMM_TABLE`) measures for the same shapes, over its own
    plateau (:func:`reference_plateau`).

    One width, the hidden size, cannot stand for a model's GEMMs: a small model's MLP
    GEMMs are four times as wide and its output head 65 times, and a training
    micro-batch's rows are many. Measured (A100 SXM4 80GB table, forward with both
    backward GEMMs), GPT-2 124M's GEMMs over 32,768 rows reach 0.86 of the plateau where
    ``w / (w + gemm_half_width)`` at its 768 gives 0.55; the L40S, H100 SXM and RTX PRO
    6000 tables measure 0.75 to 0.94 for the same shapes. Each group's FLOPs run at its
    own rate, as :func:`_measured_gemm_rate` times them."""
    table = REFERENCE_GEMM_TABLE
    dtype = "fp8" if fp8 and "fp8" in kernel_tables()[table].gemm else "bf16"
    rate = _table_gemm_rate(table, dtype, shape, lay, tokens)
    return 1.0 if rate is None else rate / reference_plateau(dtype)


@lru_cache(maxsize=4)
def reference_plateau(dtype: str = "bf16") -> float:
    """The reference table's plateau: the mean rate of its square GEMMs ``n = k`` of
    4096 to 16384 over 4096 and 8192 rows (where neither the width nor the rows limit
    it)."""
    table = REFERENCE_GEMM_TABLE
    rates = [
        2.0 * m * w * w / gemm_seconds(table, dtype, m, w, w)
        for w in (4096, 8192, 16384)
        for m in (4096, 8192)
    ]
    return sum(rates) / len(rates)


def expert_gemm_groups(
    shape: StepShape, lay: Parallelism, tokens: float
) -> tuple[tuple[int, tuple[Gemm, ...]], ...]:
    """The GEMMs of one GPU's pass, grouped by their rows: ``(m, gemms)``.

    A dense model is one group over ``tokens`` rows (:func:`model_gemms`). In an MoE
    model the routed experts are separate small GEMMs: Megatron-core's alltoall token
    dispatcher (NVIDIA/Megatron-LM, megatron/core/transformer/moe/token_dispatcher.py at
    0014f13713bf) sends each token's ``top_k`` copies to the ranks holding their experts
    and sorts them by local expert, and the grouped GEMM (TE ``GroupedLinear``, or
    ``moe_grouped_gemm``'s per-expert loop) runs each local expert over its own rows. With
    balanced routing (the benchmarks force it) an expert gets ``tokens · top_k · EP /
    experts`` rows, and a GPU runs ``experts / EP`` of them per MoE layer: the same FLOPs
    as one wide GEMM of the active width, at the far lower rate of a GEMM of ``m`` a few
    hundred to a few thousand rows and ``n`` one expert wide (the measured table's own
    small-shape latencies). The attention projections, the head, the dense layers' MLPs
    and a shared expert run over all ``tokens`` rows."""
    rows = max(round(tokens), 1)
    layers = -(-shape.num_layers // lay.pipeline)
    routed = shape.experts > 0 and shape.expert_width > 0 and shape.moe_layers > 0
    if not routed:
        gemms = model_gemms(
            hidden=shape.hidden_size,
            kv_width=shape.kv_width,
            mlp_width=shape.mlp_width,
            vocab=shape.vocab_size,
            tensor=lay.tensor,
            layers=layers,
        )
        return ((rows, gemms),)
    moe = min(-(-shape.moe_layers // lay.pipeline), layers)
    t, h = lay.tensor, shape.hidden_size
    dense_width = shape.dense_mlp_width or shape.mlp_width
    shared = max(shape.mlp_width - shape.experts_per_token * shape.expert_width, 0)
    common = model_gemms(
        hidden=h,
        kv_width=shape.kv_width,
        mlp_width=0,
        vocab=shape.vocab_size,
        tensor=t,
        layers=layers,
    )
    mlps = [(layers - moe, dense_width), (moe, shared)]
    for count, width in mlps:
        if count > 0 and width >= t:
            common += (
                (count, float(round(width / t)), float(h)),
                (count, float(h), float(round(width / t))),
            )
    ep = max(lay.expert, 1)
    local = moe * max(shape.experts // ep, 1)
    expert_rows = max(round(tokens * shape.experts_per_token * ep / shape.experts), 1)
    one = float(max(round(shape.expert_width / t), 1))
    experts = ((local, one, float(h)), (local, float(h), one))
    return ((rows, common), (expert_rows, experts))


def _measured_attention_seconds(
    shape: StepShape, lay: Parallelism, rates: Rates, layers: int
) -> float | None:
    """Fused causal attention of one micro-batch by the measured prefill table: the
    forward of each layer's heads (split by tensor parallelism), and the backward at
    :data:`FUSED_ATTENTION_BACKWARD_OVER_FORWARD` times it (not the model FLOPs' twice:
    it recomputes the scores, at a lower rate), context parallelism splitting the work.
    None: the table measured no attention."""
    table = rates.kernel_table
    assert table is not None
    if kernel_tables()[table].context_attention is None:
        return None
    heads = max(shape.num_heads / lay.tensor, 1.0)
    forward = context_attention_seconds(
        table, float(shape.batch_size), float(shape.seq), heads, float(shape.head_dim)
    )
    both = 1 + FUSED_ATTENTION_BACKWARD_OVER_FORWARD
    return both * layers * forward / lay.context / rates.kernels.measured_kernel_share


def _flash2_seconds(
    shape: StepShape, lay: Parallelism, rates: Rates, layers: int
) -> tuple[float, float] | None:
    """(seconds, forward share) of one micro-batch's fused causal attention at
    FlashAttention-2's measured rates (:mod:`gpuplan.core.perf.flash_attention`), scaled
    as the measured table's are (``kernels.measured_kernel_share``, context parallelism);
    None on a generation with no such table (it keeps the measured prefill table)."""
    table = flash2_tables().get(rates.generation.name)
    if table is None:
        return None
    keys = float(shape.seq)
    forward_rate, backward_rate = table.rates(keys)
    heads = max(shape.num_heads / lay.tensor, 1.0)
    forward_flops = 2 * 2 * shape.batch_size * keys * keys * shape.head_dim * heads / 2
    forward = forward_flops / (forward_rate * 1e12)
    backward = table.backward_flops_over_forward * forward_flops / (backward_rate * 1e12)
    scale = layers / lay.context / rates.kernels.measured_kernel_share
    return (forward + backward) * scale, forward / (forward + backward)


def _micro_comm(
    shape: StepShape, lay: Parallelism, links: StepLinks, attention_s: float
) -> tuple[float, float, float, float]:
    """(tensor, context exposed, expert, pipeline) seconds of one micro-batch's traffic."""
    if lay.tensor == lay.context == lay.expert == lay.pipeline == 1:
        return 0.0, 0.0, 0.0, 0.0  # no model parallelism: each term below is zero
    local_tokens = shape.batch_size * shape.seq / lay.context
    layers = -(-shape.num_layers // lay.pipeline)
    # Tensor parallelism: two collectives of the layer's activations forward and two
    # backward (all-reduces, or with sequence parallelism an all-gather and a
    # reduce-scatter each: the same bytes); a full recompute repeats the forward two.
    message = local_tokens * shape.hidden_size * shape.activation_bytes
    tensor = (
        layers * _tensor_collectives(shape) * all_reduce_seconds(message, lay.tensor, links.tensor)
    )
    # Context parallelism: each layer gathers every rank's keys and values forward and
    # reduce-scatters their gradients backward, behind the attention compute. A GPU
    # moves only its tensor-parallel rank's heads (:func:`context_kv_width`).
    kv = local_tokens * context_kv_width(shape, lay) * 2 * shape.activation_bytes * lay.context
    context = max(
        0.0, layers * 2 * all_gather_seconds(kv, lay.context, links.context) - attention_s
    )
    # Expert parallelism: dispatch and combine all-to-alls forward and backward per MoE layer.
    moe_layers = -(-shape.moe_layers // lay.pipeline)
    expert = (
        moe_layers * 4 * _expert_exchange_seconds(shape, lay, links, local_tokens / lay.tensor)
        if lay.expert > 1
        else 0.0
    )
    pipeline = (
        2 * lay.virtual_stages * transfer_seconds(message, links.pipeline)
        if lay.pipeline > 1
        else 0.0
    )
    return tensor, context, expert, pipeline


def _tensor_collectives(shape: StepShape) -> float:
    """A layer's tensor-parallel collectives in one micro-batch: two forward, two
    backward, and a full recompute repeats the forward's two in the checkpointed layers."""
    return 4 + (2 / shape.checkpoint_every if shape.checkpointing == "full" else 0)


def _expert_exchange_seconds(
    shape: StepShape, lay: Parallelism, links: StepLinks, tokens: float
) -> float:
    """One dispatch (or combine) of ``tokens`` hidden vectors over the expert group."""
    token_bytes = shape.hidden_size * shape.activation_bytes
    if not shape.deduplicated_dispatch:
        return all_to_all_seconds(
            tokens * shape.experts_per_token * token_bytes,
            lay.expert,
            links.expert,
            local=links.expert_local,
            local_link=links.expert_local_link,
        )
    ranks, local = lay.expert, min(max(links.expert_local, 1), lay.expert)
    near_link = links.expert if local >= ranks else links.expert_local_link or links.expert
    # Copies one token sends: to the other ranks of its node that hold one of its experts
    # and, on every node it reaches, the forwarder's copies to that node's other ranks
    # (each GPU forwards as many as it sends, by symmetry); one copy to each other node
    # that holds one of its experts, over the network.
    per_rank = 1 - routed_miss(shape.experts, shape.experts_per_token, ranks)
    nodes = -(-ranks // local)
    near = nodes * (local - 1) * per_rank * tokens * token_bytes
    per_node = 1 - routed_miss(shape.experts, shape.experts_per_token, nodes)
    far = (nodes - 1) * per_node * tokens * token_bytes
    return exchange_seconds(near, near_link, far, links.expert, ranks)


def routed_miss(experts: int, per_token: int, groups: int) -> float:
    """Chance that none of a token's ``per_token`` distinct experts lies in one given
    group of ``groups`` equal groups of ``experts``, routing uniform (the balanced
    routing the model assumes): ``C(E - E/g, k) / C(E, k)``."""
    if groups <= 1 or experts <= 0:
        return 0.0
    outside = experts - experts / groups
    miss = 1.0
    for i in range(min(per_token, experts)):
        miss *= max(outside - i, 0.0) / (experts - i)
    return miss


def context_kv_width(shape: StepShape, lay: Parallelism) -> float:
    """Key (or value) width per token one GPU's context-parallel exchange moves.

    Tensor parallelism splits the attention heads before context parallelism sees them:
    Megatron-core's attention holds ``num_query_groups_per_partition =
    divide(num_query_groups, tensor_model_parallel_world_size)`` key/value heads on a
    rank (NVIDIA/Megatron-LM, megatron/core/transformer/attention.py at
    00c2c0adeec1), and the core attention (Transformer Engine's context-parallel ring,
    which sends each rank's keys and values to the next) sees only those. So each
    context-parallel rank moves ``kv_width / tensor`` per token, never less than one head."""
    local = shape.kv_width / max(lay.tensor, 1)
    return max(local, float(shape.head_dim)) if shape.head_dim > 0 else local


def training_step(
    t: TokenFlops,
    shape: StepShape,
    layout: Parallelism,
    *,
    rates: Rates,
    links: StepLinks,
    framework: Framework,
    comm_overlap: float | None = None,
    micro: MicroBatch | None = None,
) -> Step:
    """The time of one optimizer step of ``accumulation`` micro-batches on every rank.

    ``comm_overlap`` (the request's ``efficiency.comm_overlap``) replaces the framework's
    share of backward that data-parallel gradient traffic hides behind. ``micro``: the
    caller's :func:`micro_batch` of these arguments, when it has it already.
    """
    lay = layout
    m = shape.accumulation
    if micro is None:
        micro = micro_batch(t, shape, lay, rates, framework)
    recompute = micro.recompute_s(shape.checkpointing, shape.checkpoint_every)
    tensor, context, expert, pipeline = _micro_comm(shape, lay, links, micro.attention_s)
    micro_exposed = (
        framework.tensor_exposed * tensor
        + context
        + framework.expert_exposed * expert
        + framework.pipeline_exposed * pipeline
    )
    # The micro-batch's properties once (each is the same sum whenever it is read).
    compute = micro.compute_s
    backward = compute - micro.forward_s  # micro.backward_s
    busy_micro = compute + recompute + micro_exposed
    # (p - 1) / v micro-batch slots idle on every stage, whatever m is (1F1B and GPipe
    # alike; interleaving divides them by the v virtual stages).
    bubble = busy_micro * (lay.pipeline - 1) / lay.virtual_stages
    data_exposed = _data_exposed(
        shape,
        lay,
        links=links,
        framework=framework,
        busy_micro=compute + recompute,
        backward_micro=backward + recompute,
        comm_overlap=comm_overlap,
    )
    optimizer = _optimizer_seconds(shape, lay, rates, links)
    seconds = m * busy_micro + bubble + data_exposed + optimizer
    # An evaluation's forward: the micro-batch's, the forward's traffic (two of the tensor
    # collectives, the recompute's aside; half of the context, expert and pipeline
    # exchanges, each as large backward as forward), and a forward-only pipeline's fill.
    forward_micro = micro.forward_s + (
        framework.tensor_exposed * tensor * 2 / _tensor_collectives(shape)
        + (context + framework.expert_exposed * expert + framework.pipeline_exposed * pipeline) / 2
    )
    forward = m * forward_micro + forward_micro * (lay.pipeline - 1) / lay.virtual_stages
    gpus = lay.tensor * lay.pipeline * lay.data * lay.context
    tokens = step_tokens(shape, lay)
    model_flops = micro.model_flops * gpus * m
    return Step(
        seconds=seconds,
        tokens=tokens,
        compute_s=m * compute,
        recompute_s=m * recompute,
        exposed_comm_s=m * micro_exposed + data_exposed,
        bubble_s=bubble,
        optimizer_s=optimizer,
        forward_s=forward,
        model_flops_per_token=model_flops / tokens,
        mfu=model_flops / (seconds * gpus * rates.peak_flops),
        kernel_source="measured" if micro.measured else "roofline",
        kernel_table=(
            kernel_tables()[rates.kernel_table].id
            if micro.measured and rates.kernel_table is not None
            else None
        ),
    )


def step_tokens(shape: StepShape, layout: Parallelism) -> int:
    """Tokens one optimizer step trains on across the job."""
    return shape.batch_size * shape.seq * shape.accumulation * layout.data


def step_floor(shape: StepShape, layout: Parallelism, micro: MicroBatch) -> float:
    """A lower bound of :func:`training_step`'s seconds for a step of ``micro`` on
    ``layout``, whatever its links and framework: every micro-batch's compute and
    recomputation, and the bubble's share of them. The step adds its communication and
    optimizer (never negative) to these, and its bubble grows with what a micro-batch
    waits for; the floor follows the step's own order of operations, so it is a bound
    in floating point too (tests/test_search_shortcuts.py checks it)."""
    work = micro.compute_s + micro.recompute_s(shape.checkpointing, shape.checkpoint_every)
    return shape.accumulation * work + work * (layout.pipeline - 1) / layout.virtual_stages


def _data_exposed(
    shape: StepShape,
    lay: Parallelism,
    *,
    links: StepLinks,
    framework: Framework,
    busy_micro: float,
    backward_micro: float,
    comm_overlap: float | None,
) -> float:
    """Data-parallel traffic left on the critical path after the framework's overlap.

    What a bucket or a prefetch hides behind cannot hide the last one: at least one
    layer's share of the traffic stays exposed, whatever the overlap."""
    if lay.data <= 1:
        return 0.0
    m = shape.accumulation
    layers = -(-shape.num_layers // lay.pipeline)
    shard = lay.tensor * lay.pipeline
    trainable = shape.trainable_parameters / shard
    held = max(shape.parameters, shape.trainable_parameters) / shard
    if lay.zero_stage == 3 and shape.flat_units:
        return _flat_units_exposed(
            shape,
            lay,
            links=links,
            framework=framework,
            busy_micro=busy_micro,
            backward_micro=backward_micro,
        )
    if lay.zero_stage == 3:
        # FSDP / ZeRO-3: gather parameters for forward and for backward and
        # reduce-scatter gradients, every micro-batch, one layer ahead of its compute:
        # hidden behind the compute except the first layer's, unless it is longer.
        per_micro = 2 * all_gather_seconds(held * shape.gather_bytes, lay.data, links.data)
        per_micro += all_gather_seconds(trainable * shape.gradient_bytes, lay.data, links.data)
        hidden = busy_micro * framework.gather_hidden_share
        return m * max(per_micro - hidden, per_micro / max(layers, 1))
    share = comm_overlap if comm_overlap is not None else framework.data_hidden_share
    hidden = backward_micro * share
    if lay.zero_stage == 2:
        # ZeRO-2 (DeepSpeed stage 2, FSDP SHARD_GRAD_OP) reduce-scatters the gradients
        # into their owners' shards every micro-batch, behind its backward, and gathers
        # the updated parameters once a step.
        scatter = all_gather_seconds(trainable * shape.gradient_bytes, lay.data, links.data)
        gather = all_gather_seconds(trainable * shape.weight_bytes, lay.data, links.data)
        return m * max(scatter - hidden, scatter / max(layers, 1)) + gather
    # DDP, ZeRO-1, Megatron's distributed optimizer: one gradient all-reduce (or
    # reduce-scatter and parameter all-gather: the same bytes) a step, in layer-sized
    # buckets behind the last micro-batch's backward.
    dense, experts, expert_ranks = expert_data_split(shape, lay)
    traffic = all_reduce_seconds(dense * shape.gradient_bytes, lay.data, links.data)
    traffic += all_reduce_seconds(experts * shape.gradient_bytes, expert_ranks, links.data)
    return max(traffic - hidden, traffic / max(layers, 1))


def expert_data_split(shape: StepShape, lay: Parallelism) -> tuple[float, float, int]:
    """(dense parameters, routed-expert parameters, ranks the experts' gradients are
    reduced over) on one GPU, for the data-parallel gradient reduction.

    Under expert parallelism a GPU holds ``1 / EP`` of each MoE layer's experts, and
    Megatron-core reduces their gradients over the expert-data-parallel group only, the
    ``data / EP`` ranks that hold the same experts (NVIDIA/Megatron-LM,
    megatron/core/parallel_state.py at 0014f13713bf: ``expert_data_parallel_size =
    world / (pipeline · expert_tensor · expert)``; the DDP wrapper's expert buckets in
    megatron/core/distributed/distributed_data_parallel.py reduce over
    ``get_expert_data_parallel_group``), while the dense parameters (attention, norms,
    router, shared expert, embeddings) reduce over all ``data`` ranks."""
    shard = lay.tensor * lay.pipeline
    trainable = shape.trainable_parameters / shard
    if lay.expert <= 1 or shape.expert_parameters <= 0:
        return trainable, 0.0, lay.data
    experts = min(shape.expert_parameters, shape.trainable_parameters) / shard
    return trainable - experts, experts / lay.expert, max(lay.data // lay.expert, 1)


def _flat_units_exposed(
    shape: StepShape,
    lay: Parallelism,
    *,
    links: StepLinks,
    framework: Framework,
    busy_micro: float,
    backward_micro: float,
) -> float:
    """FSDP1's ``FULL_SHARD`` traffic left on the critical path.

    Every unit is all-gathered for its forward and again for its backward, except the
    root (not resharded after its forward: ``_post_forward_reshard``), and each
    trainable unit's flat gradient is reduce-scattered after its backward, or once a
    step under ``no_sync()``. With backward prefetch the gathers and reduce-scatters hide
    behind the neighbouring units' compute as ZeRO-3's do (the framework's
    ``gather_hidden_share``; at least one unit's share stays exposed). Without it only
    the forward's gathers can hide (behind the forward); in the backward the next unit's
    all-gather is issued after this unit's reduce-scatter on the same communicator, and
    the next unit's compute waits for both.
    """
    m = shape.accumulation
    layers = max(-(-shape.num_layers // lay.pipeline), 1)
    shard = lay.tensor * lay.pipeline
    held = max(shape.parameters, shape.trainable_parameters) / shard
    reduced = (
        shape.reduced_parameters
        if shape.reduced_parameters is not None
        else shape.trainable_parameters
    ) / shard
    root = shape.root_parameters / shard
    forward = all_gather_seconds(held * shape.gather_bytes, lay.data, links.data)
    backward = all_gather_seconds((held - root) * shape.gather_bytes, lay.data, links.data)
    scatter = all_gather_seconds(reduced * shape.gradient_bytes, lay.data, links.data)
    # Each adapter unit's collectives move a few kilobytes but pay a ring's start-ups as
    # any other (comm.all_gather_seconds: (k - 1) steps of the link's latency); the bytes
    # are in the sums above.
    start_ups = shape.adapter_units * layers * (lay.data - 1) * links.data.latency_s
    forward += start_ups
    backward += start_ups
    scatter += start_ups
    scatters = 1 if shape.reduce_once else m
    share = framework.gather_hidden_share
    if shape.backward_overlap:
        traffic = m * (forward + backward) + scatters * scatter
        hidden = m * busy_micro * share
        return max(traffic - hidden, traffic / layers)
    forward_micro = busy_micro - backward_micro
    exposed_forward = max(forward - forward_micro * share, forward / layers)
    return m * (exposed_forward + backward) + scatters * scatter


def _optimizer_seconds(shape: StepShape, lay: Parallelism, rates: Rates, links: StepLinks) -> float:
    """The optimizer step reads and writes its states once (memory-bound); offloaded to
    the host, the gradients go down and the updated weights come back instead."""
    shards = lay.tensor * lay.pipeline * (lay.data if lay.zero_stage >= 1 else 1)
    local = shape.trainable_parameters / shards
    if lay.cpu_offload.optimizer:
        return max(
            transfer_seconds(local * shape.gradient_bytes, links.host),
            transfer_seconds(local * shape.weight_bytes, links.host),
        )
    moved = local * rates.kernels.optimizer_bytes_per_parameter
    return moved / (rates.bandwidth_bytes_per_s * rates.generation.bandwidth_efficiency)
