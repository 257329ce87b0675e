"""What the hardware delivers of its datasheet, stored as data (data/efficiency.toml).

A datasheet peak is what no real job reaches, and how far it falls short is not one
number: a training step is large GEMMs (near the tensor-core peak when they are wide),
attention kernels (a smaller share of it), and memory-bound elementwise kernels (norms,
activations, residual adds, casts) that run at the memory bandwidth, not the FLOP rate,
plus a launch cost per layer. A GPU whose FLOP rate grew faster than its bandwidth
(H100 over A100: 3.2x the FLOPs, 1.7x the bandwidth) therefore reaches a smaller share
of its peak on the same model, and a narrow model (small GEMMs, a larger elementwise
share) a smaller share than a wide one. The speed model (:mod:`gpuplan.core.perf.step`)
times each part with the efficiencies below; the model FLOPs utilization (MFU) of a plan
is its result, not an input.

Each GPU generation's efficiencies, the kernel constants and the frameworks' overlap
carry their source: the published runs they were fitted to (``bench/published``), or the
document that states them. A request can still set ``efficiency.mfu`` and ``mbu``.
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Annotated, Literal, get_args

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.record import Record

Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
FrameworkName = Literal["ddp", "fsdp1", "fsdp2", "deepspeed", "megatron"]


class Generation(Record, kw_only=True):
    """How much of its datasheet one GPU generation delivers, per kind of kernel."""

    name: str
    match: list[str]
    """Words of a catalog ``architecture`` or ``id`` that select this generation."""

    gemm_efficiency: Fraction
    """Share of the 16-bit dense peak a wide GEMM reaches (the curve's plateau)."""

    fp8_gemm_efficiency: Fraction
    """Share of the fp8 dense peak a wide fp8 GEMM reaches, scaling and casts included."""

    attention_efficiency: Fraction
    """Share of the 16-bit peak fused attention (FlashAttention) reaches, forward and
    backward together."""

    bandwidth_efficiency: Fraction
    """Share of the memory bandwidth memory-bound kernels reach (elementwise, optimizer)."""

    decode_bandwidth_efficiency: Fraction
    """Share of the memory bandwidth a decode step reaches reading weights and the KV
    cache (the MBU of serving at small batches)."""

    verified: bool
    source: str
    measured_plateau: bool = False
    """``gemm_efficiency`` is one card's measured matmul rate (:class:`Card`), a kernel
    timed alone: a training step realizes ``kernels.measured_kernel_share`` of it, as of
    a measured kernel table's."""


class Kernels(Record, kw_only=True):
    """Constants of the kernels every generation runs (they scale with the model)."""

    gemm_half_width: Annotated[float, msgspec.Meta(gt=0)]
    """GEMM width (hidden size per tensor-parallel rank) at which a GEMM reaches half its
    plateau: ``efficiency(w) = plateau · w / (w + half_width)``."""

    gemm_half_tokens: Annotated[float, msgspec.Meta(gt=0)]
    """Rows (tokens) at which a GEMM reaches half its plateau: a decode step of a few
    sequences or a short prompt leaves most of the GPU's tiles idle."""

    eager_hidden_bytes: Annotated[float, msgspec.Meta(ge=0)]
    """Bytes an eager layer's memory-bound kernels (normalizations, rotary embedding,
    residual adds, layout copies) move per token per unit of hidden size, in 16-bit
    activations, forward and backward. Counted from the model's code, not fitted
    (``python -m bench.kernels.eager_bytes``)."""

    eager_kv_bytes: Annotated[float, msgspec.Meta(ge=0)]
    """The same per unit of key/value width (rotary on the keys, grouped-query
    attention's copies of the keys and values to every head)."""

    eager_mlp_bytes: Annotated[float, msgspec.Meta(ge=0)]
    """The same per unit of the MLP's active width (the gated activation)."""

    compile_elementwise_factor: Fraction
    """What of the elementwise traffic, and of the launches, is left after
    ``torch.compile`` fuses kernels."""

    eager_score_bytes: Annotated[float, msgspec.Meta(ge=0)]
    """Bytes moved per attention score when the scores are materialized (eager
    attention): written, read by softmax, its output written and read by the weighted
    sum, a dropout mask, forward and backward."""

    layer_overhead_seconds: Annotated[float, msgspec.Meta(ge=0)]
    """Launch and host cost per layer per micro-batch (forward and backward)."""

    decode_overhead_seconds: Annotated[float, msgspec.Meta(ge=0)]
    """Host and launch cost per decode step per layer (batch-independent)."""

    optimizer_bytes_per_parameter: Annotated[float, msgspec.Meta(ge=0)]
    """Bytes the optimizer step reads and writes per trainable parameter (Adam: fp32
    master, two moments, the gradient, the 16-bit copy)."""

    measured_kernel_share: Fraction = 1.0
    """Share of a measured kernel table's speed (GEMMs and attention timed alone, on an
    idle GPU: :mod:`gpuplan.core.perf.kernels`) that a training step realizes: clocks
    under sustained power, gaps between kernels, the framework's dispatch. Fitted."""

    verified: bool
    source: str


class Framework(Record, kw_only=True):
    """What a training framework overlaps with compute (``parallelism.framework``)."""

    name: FrameworkName
    tensor_exposed: Share
    """Share of tensor-parallel collectives left on the critical path."""

    elementwise_factor: Fraction
    """What of the elementwise traffic its fused kernels leave (Megatron with Transformer
    Engine fuses norms, bias, activation and dropout; eager PyTorch does not)."""

    data_hidden_share: Share
    """Share of the last micro-batch's backward that gradient traffic (DDP, ZeRO-1/2,
    the distributed optimizer) hides behind; one layer's bucket stays exposed. ZeRO-3 and
    FSDP prefetch instead: their gathers hide behind the neighbouring layers' compute."""

    gather_hidden_share: Share
    """ZeRO-3 / FSDP: share of each micro-batch's compute that its parameter gathers and
    gradient reduce-scatters hide behind (prefetching one layer ahead)."""

    pipeline_exposed: Share
    """Share of pipeline point-to-point sends left on the critical path."""

    expert_exposed: Share
    """Share of expert-parallel all-to-alls left on the critical path."""

    source: str


class Card(Record, kw_only=True):
    """One GPU's measured 16-bit matmul rate, and where measured its fp8 matmul rate and
    copy bandwidth: they replace its generation's ``gemm_efficiency``,
    ``fp8_gemm_efficiency`` and ``bandwidth_efficiency`` (:func:`generation`)."""

    gpu: str
    """Catalog id."""

    dtype: Literal["bf16", "fp16"]
    """The precision the matmul rate was measured in."""

    matmul_flops: Annotated[float, msgspec.Meta(gt=0)]
    """The best rate of large matmuls, FLOP/s."""

    fp8_matmul_flops: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """The same in fp8, where measured; without it the fp8 plateau is the generation's
    ratio of fp8 to 16-bit plateau on the measured 16-bit share."""

    copy_bytes_per_s: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """A large device-to-device copy, bytes read and written per second, where
    measured; without it the generation's ``bandwidth_efficiency`` stands."""

    source: str
    quote: str


class Latency(Record, kw_only=True):
    nvlink_seconds: float
    pcie_seconds: float
    network_seconds: float
    verified: bool
    source: str


class Vision(Record, kw_only=True):
    mfu_factor: Fraction
    """Multiplies the GEMM efficiency for convolutional and vision models."""

    verified: bool
    source: str


class Serving(Record, kw_only=True):
    """A continuous-batching server's step and sequence limits (vLLM's defaults; each
    engine's memory share and KV block are in core/recommend/data/engines.toml). Which
    of them a GPU gets is :func:`gpuplan.core.recommend.engine.large_gpu`'s rule."""

    max_sequences: Annotated[int, msgspec.Meta(ge=1)]
    """Sequences one replica keeps in flight at most (``max_num_seqs``)."""

    large_gpu_max_sequences: Annotated[int, msgspec.Meta(ge=1)]
    """The cap on GPUs of at least ``large_gpu_min_memory_bytes``."""

    large_gpu_min_memory_bytes: Annotated[int, msgspec.Meta(ge=0)]
    large_gpu_excludes: list[str]
    """Words of a GPU id that keep the smaller cap although the memory is large."""

    max_batched_tokens: Annotated[int, msgspec.Meta(ge=1)]
    """Tokens one engine step takes at most (``max_num_batched_tokens``)."""

    large_gpu_max_batched_tokens: Annotated[int, msgspec.Meta(ge=1)]

    verified: bool
    source: str


class EfficiencyData(Record, kw_only=True):
    generations: list[Generation] = msgspec.field(name="generation")
    kernels: Kernels
    frameworks: list[Framework] = msgspec.field(name="framework")
    cards: list[Card] = msgspec.field(name="card", default_factory=list)
    latency: Latency
    vision: Vision
    serving: Serving


@cache
def efficiency_data() -> EfficiencyData:
    """The shipped data, validated at load (a malformed file fails at import time)."""
    text = resources.files("gpuplan.core.perf.data").joinpath("efficiency.toml").read_text("utf-8")
    data = msgspec.convert(tomllib.loads(text), EfficiencyData)
    if not data.generations or data.generations[-1].match:
        raise ValueError("efficiency.toml: the last generation must be the catch-all (no match)")
    names = sorted(f.name for f in data.frameworks)
    if names != sorted(get_args(FrameworkName)):
        raise ValueError(
            f"efficiency.toml: frameworks {names}, expected each of {sorted(get_args(FrameworkName))} once"
        )
    return data


def generation(gpu: GpuSpec) -> Generation:
    """The first generation naming a word of the GPU's architecture or id, with the
    GPU's own measured matmul rate and copy bandwidth (:class:`Card`) where one is
    shipped: its ``gemm_efficiency`` is then the measured rate over the datasheet's
    16-bit peak (at most 1: a GeForce card boosts past the clock its datasheet peak is
    quoted at), its ``fp8_gemm_efficiency`` the generation's ratio of fp8 to 16-bit
    plateau on that share, and its ``bandwidth_efficiency`` the copy's share of the
    datasheet bandwidth."""
    return _measured(_matching(f"{gpu.architecture} {gpu.id}".lower()), gpu)


@cache
def _matching(text: str) -> Generation:
    """The first generation naming a word of ``text`` (memoized: every request asks it
    of every GPU, and the shipped data does not change)."""
    for gen in efficiency_data().generations:
        if not gen.match or any(word in text for word in gen.match):
            return gen
    raise AssertionError("unreachable: the last generation matches everything")


@cache
def _card(gpu_id: str) -> Card | None:
    """The shipped measurement of the GPU ``gpu_id``, if any (memoized as above)."""
    return next((c for c in efficiency_data().cards if c.gpu == gpu_id), None)


def _measured(gen: Generation, gpu: GpuSpec) -> Generation:
    card = _card(gpu.id)
    peak = gpu.peak_flops.get(card.dtype) if card is not None else None
    if card is None or not peak:
        return gen
    share = min(1.0, card.matmul_flops / peak)
    fp8_peak = gpu.peak_flops.get("fp8")
    if card.fp8_matmul_flops is not None and fp8_peak:
        fp8_share = min(1.0, card.fp8_matmul_flops / fp8_peak)
    else:
        # fp8 not measured: the generation's fp8 plateau as a share of its 16-bit one
        # (how bench/published/fit parameterizes it), on the measured 16-bit share
        fp8_share = min(1.0, share * gen.fp8_gemm_efficiency / gen.gemm_efficiency)
    bandwidth = gen.bandwidth_efficiency
    if card.copy_bytes_per_s is not None:
        bandwidth = min(1.0, card.copy_bytes_per_s / gpu.memory_bandwidth_bytes_per_s)
    return msgspec.structs.replace(
        gen,
        gemm_efficiency=share,
        fp8_gemm_efficiency=fp8_share,
        bandwidth_efficiency=bandwidth,
        measured_plateau=True,
        source=(
            f"{gpu.id} GEMM plateau{'' if card.copy_bytes_per_s is None else ' and bandwidth'} "
            f"measured ({card.source}: {card.quote!r}); "
            f"the rest: {gen.source}"
        ),
    )


def framework(name: FrameworkName) -> Framework:
    return next(f for f in efficiency_data().frameworks if f.name == name)
