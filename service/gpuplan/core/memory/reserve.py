"""``max_memory_reserved``: the caching allocator's segments, from the step's pattern.

``torch.cuda.max_memory_allocated`` counts the bytes handed out (tensors, and the cuBLAS
workspaces); ``max_memory_reserved`` counts
the segments PyTorch's caching allocator obtained from ``cudaMalloc`` to hold them,
and it never gives a segment back during a job (no ``empty_cache``). The gap is not a
percentage of the peak: it comes from the order and the sizes of the step's requests.
Our replays of real Hugging Face steps through the allocator's rules
(:mod:`gpuplan.core.trace.allocator`, ``python -m bench.accuracy.reserve``) show where
it comes from:

* the first step creates the optimizer states late, inside segments its own
  activations and loss buffers had just freed, so the second step's largest
  transients (the fp32 logits of the loss) find no free block big enough and get
  fresh segments;
* gradient checkpointing recomputes one layer's activations inside the backward;
  those blocks are cached and free, and too small for the loss's buffers, at the peak;
* blocks of one size class serve requests of a smaller class (best fit, split), never
  of a larger one.

So the estimator writes the step down as the allocator sees it: one request per
tensor of the sizes it already prices (each layer's weights, gradients and optimizer
states; its saved activations in blocks of the residual and the feed-forward width;
its backward's temporaries; the head's logits and loss buffers; the optimizer's
per-tensor temporaries), replays a warm-up step and a measured one through the same
allocator model the tracer uses, and reports the replay's reserved-minus-allocated
gap on top of its own exact peak. Identical layers make identical requests, so the
gap saturates after a few layers: the replay uses at most :data:`REPLAY_LAYERS`
(the tracer's replays of 8, 16 and 28-layer Llama steps agree within 2-5% of the gap).
"""

from functools import lru_cache
from typing import NamedTuple

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.dims import Dims
from gpuplan.core.memory.head import HeadCost
from gpuplan.core.memory.layers_records import LayerCost
from gpuplan.core.memory.numerics import FP32, Numerics
from gpuplan.core.memory.parameters import LayerParameters, ParameterCount
from gpuplan.core.trace.allocator import CachingAllocator, _Block

REPLAY_LAYERS = 8
"""Layers replayed; the gap of more identical layers is the gap of these."""

REPLAY_MICRO_BATCHES = 3
"""Micro-batches replayed per step: the first allocates the gradients, the next ones
free and re-request the same activations into the same blocks, so the allocator's state
repeats from the second on (a step of 512 micro-batches replays as quickly as one of 3)."""

UNREPLAYED_CACHE = 0.05
"""Vision presets and bare parameter counts have no tensor pattern to replay; their
gap is taken as 5% of the bytes that change during the step, the low end of
practitioners' margins (Megatron-LM's 1.05 factor on its activation estimate,
megatron/training/theoretical_memory_usage.py)."""


class Pattern(NamedTuple):
    """A step's requests, in bytes, as the allocator sees them (hashable: memoized)."""

    outer_weights: tuple[int, ...]
    """Embedding, final norm and head tensors, in build order."""

    layer_weights: tuple[int, ...]
    """One layer's parameter tensors (their stored bytes)."""

    layer_loads: tuple[int, ...]
    """The 16-bit copies each of them is loaded through (empty: none)."""

    layers: int
    layer_grads: tuple[int, ...]
    """Gradient bytes of each of one layer's trainable tensors, attention's first."""

    attention_grads: int
    """How many of ``layer_grads`` the attention half of the backward creates."""

    outer_grads: tuple[int, ...]
    states_per_grad: int
    """Optimizer state tensors per trainable tensor (Adam: 2)."""

    state_scale: float
    """State bytes per gradient byte."""

    optimizer_temporaries: bool
    """The optimizer's multi-tensor kernels allocate one temporary per tensor."""

    attention_saved: tuple[int, ...]
    mlp_saved: tuple[int, ...]
    """A layer's saved activations, the attention half then the MLP half."""

    attention_backward: tuple[int, ...]
    mlp_backward: tuple[int, ...]
    checkpoint_input: int
    """Full checkpointing: the layer input kept (0: no checkpointing)."""

    head_saved: tuple[int, ...]
    """Kept from the head's forward to its backward (final norm, the head's input)."""

    logits: int
    """The logits the head returns, alive until the loop drops the model's output."""

    upcast: int
    """Their fp32 copy for the loss (0 when already fp32), dropped after the loss."""

    loss_saved: int
    """What the loss keeps for backward (the log-softmax)."""

    loss_backward: tuple[int, ...]
    """The loss backward's gradients (of the log-softmax's output, then its input)."""
    accumulation: int
    inference: bool
    kv_per_layer: tuple[int, ...]
    """Inference: the cache blocks each layer allocates and keeps."""

    forward_transient: tuple[int, ...]
    """Inference: a layer's temporaries, freed with it."""

    quantize_steps: tuple[tuple[str, str, float], ...] = ()
    """Quantizing after a full load (torchao): one weight's requests, in bytes per
    element (:func:`gpuplan.core.memory.torchao.quantize_steps`); empty: none."""

    layer_elements: tuple[int, ...] = ()
    """Elements of each of ``layer_loads``, which then hold the whole 16-bit model."""

    head_elements: int = 0
    """Elements of the head, quantized last (0: kept in 16-bit); its 16-bit block is
    ``outer_weights``' last."""


def allocator_gap(pattern: Pattern) -> int:
    """``max_memory_reserved - max_memory_allocated`` of ``pattern`` replayed."""
    return _replay(pattern)


def forget() -> None:
    """Drop the memo of replays (benchmarks time the first estimate of a pattern)."""
    _replay.cache_clear()
    _quantize_replay.cache_clear()


def quantization_reserve(pattern: Pattern) -> int:
    """Bytes the reserve grows by while a fully loaded 16-bit model is quantized.

    The replay loads the 16-bit model (its layers' tensors in ``layer_loads``), then
    quantizes weight after weight in module order, each through
    ``pattern.quantize_steps``, releasing its 16-bit block once its quantized copy
    exists. The 16-bit blocks stay reserved; what the replay adds on top are the
    segments of temporaries no freed block can hold: the first layer's (later layers
    reuse them), and the head's, larger than any layer block. Identical layers repeat
    the same reuse, so the growth of :data:`REPLAY_LAYERS` layers is the model's.
    """
    return _quantize_replay(pattern)


@lru_cache(maxsize=256)
def _quantize_replay(p: Pattern) -> int:
    run = _Run()
    layers = min(p.layers, REPLAY_LAYERS)
    alloc, release = run.alloc, run.allocator.release
    embedding = [alloc(n) for n in p.outer_weights[:1]]
    loaded = [[alloc(n) for n in p.layer_loads] for _ in range(layers)]
    rest = [alloc(n) for n in p.outer_weights[1:]]
    base = run.allocator.reserved
    kept = []
    for blocks in loaded:
        for block, n in zip(blocks, p.layer_elements, strict=True):
            kept.append(_quantize(run, p.quantize_steps, n))
            if block is not None:
                release(block)
    if p.head_elements and rest:
        kept.append(_quantize(run, p.quantize_steps, p.head_elements))
        head = rest.pop()
        if head is not None:
            release(head)
    del embedding, kept
    return max(run.allocator.peak_reserved - base, 0)


def _quantize(run: "_Run", steps: tuple[tuple[str, str, float], ...], n: int) -> _Block | None:
    """One weight through a recipe; returns its quantized copy."""
    live: dict[str, _Block | None] = {}
    for op, slot, size in steps:
        if op == "alloc":
            live[slot] = run.alloc(int(size * n))
        else:
            block = live.pop(slot)
            if block is not None:
                run.allocator.release(block)
    return live.pop("out", None)


@lru_cache(maxsize=1024)
def _replay(p: Pattern) -> int:
    run = _Run()
    layers = min(p.layers, REPLAY_LAYERS)
    weights = [run.alloc(n) for n in p.outer_weights[:1]]
    for _ in range(layers):
        if p.layer_loads and not p.quantize_steps:
            for load, n in zip(p.layer_loads, p.layer_weights, strict=True):
                copy = [run.alloc(load)]
                weights.append(run.alloc(n))
                run.free_all(copy)
        else:
            weights += [run.alloc(n) for n in p.layer_weights]
    weights += [run.alloc(n) for n in p.outer_weights[1:]]
    if p.inference:
        _prefill(run, p, layers)
        return run.gap()
    states: list[_Block | None] = []
    for step in range(2):
        grads: list[_Block | None] = []
        for _ in range(min(p.accumulation, REPLAY_MICRO_BATCHES)):
            fresh = not grads
            grads = _micro_step(run, p, layers, grads, fresh=fresh)
        if step == 0:
            # The first optimizer step creates the states, parameter by parameter.
            per = [*p.outer_grads[:1], *(p.layer_grads * layers), *p.outer_grads[1:]]
            for n in per:
                states += [run.alloc(int(n * p.state_scale)) for _ in range(p.states_per_grad)]
        if p.optimizer_temporaries:
            per = [*p.outer_grads[:1], *(p.layer_grads * layers), *p.outer_grads[1:]]
            temporaries = [run.alloc(int(n * p.state_scale)) for n in per]
            run.free_all(temporaries)
        run.free_all(grads)  # zero_grad(set_to_none=True)
    del weights, states
    return run.gap()


def _micro_step(
    run: "_Run", p: Pattern, layers: int, grads: list[_Block | None], *, fresh: bool
) -> list[_Block | None]:
    """One forward and backward; gradients are created (or, accumulating, added to)."""
    kept: list[list[_Block | None]] = []
    for _ in range(layers):
        attention = [run.alloc(n) for n in p.attention_saved]
        mlp = [run.alloc(n) for n in p.mlp_saved]
        if p.checkpoint_input:
            run.free_all(attention + mlp)
            kept.append([run.alloc(p.checkpoint_input)])
            continue
        kept.append(attention + mlp)
    head = [run.alloc(n) for n in p.head_saved]
    head.append(run.alloc(p.loss_saved))
    # The loss's transients: the fp32 copy of the logits, and the logits themselves once
    # the loop drops the model's output.
    transient = [run.alloc(p.upcast), run.alloc(p.logits)]
    run.free_all(transient)
    temps = [run.alloc(n) for n in p.loss_backward]
    run.free_all(head)
    created = [run.alloc(n) for n in reversed(p.outer_grads[1:])]
    run.free_all(temps)
    for index in reversed(range(layers)):
        own = kept[index]
        if p.checkpoint_input:
            run.free_all(own)
            own = [run.alloc(n) for n in (*p.attention_saved, *p.mlp_saved)]
        split = len(own) - len(p.mlp_saved)
        for saved, temporary, names in (
            (own[split:], p.mlp_backward, p.layer_grads[p.attention_grads :]),
            (own[:split], p.attention_backward, p.layer_grads[: p.attention_grads]),
        ):
            temps = [run.alloc(n) for n in temporary]
            created += [run.alloc(n) for n in reversed(names)]
            run.free_all(saved)
            run.free_all(temps)
    created += [run.alloc(n) for n in p.outer_grads[:1]]
    if fresh:
        return created
    # Accumulating: each new gradient is added into the kept one, then released.
    run.free_all(created)
    return grads


def _prefill(run: "_Run", p: Pattern, layers: int) -> None:
    cache: list[_Block | None] = []
    for _ in range(layers):
        temps = [run.alloc(n) for n in p.forward_transient]
        cache += [run.alloc(n) for n in p.kv_per_layer]
        run.free_all(temps)
    head = [run.alloc(p.logits), run.alloc(p.upcast)]
    run.free_all(head)


class _Run:
    """The allocator and the bytes it has handed out."""

    def __init__(self) -> None:
        self.allocator = CachingAllocator()
        self.alloc = self.allocator.malloc

    def free_all(self, blocks: list[_Block | None]) -> None:
        release = self.allocator.release
        for block in blocks:
            if block is not None:
                release(block)
        blocks.clear()

    def gap(self) -> int:
        return max(self.allocator.peak_reserved - self.allocator.peak_allocated, 0)


MAX_BLOCKS = 8
"""Requests one group (a layer half's saved tensors, its backward's temporaries) is
written as: more, smaller ones would only repeat the same reuse, at more replay cost."""


def _blocks(total: float, unit: float) -> tuple[int, ...]:
    """``total`` bytes as requests of ``unit`` bytes, and one for the remainder."""
    if total <= 0:
        return ()
    if unit <= 0 or unit >= total:
        return (int(total),)
    unit = max(unit, total / MAX_BLOCKS)
    count = int(total // unit)
    rest = int(total - count * unit)
    return (int(unit),) * count + ((rest,) if rest >= 512 else ())


def layer_tensors(
    arch: Architecture, layer: LayerParameters, tp: int, ep: int
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(attention, MLP) parameter tensors of one layer, in elements on one GPU.

    Shapes as Hugging Face stores them: q, k, v, o (MLA's six projections are read as
    four of the same total), gate, up, down, and an MoE layer's experts as two fused
    tensors (transformers 5: ``gate_up_proj`` and ``down_proj``) beside its router.
    """
    h = arch.hidden_size
    if arch.mla is None:
        q, kv = arch.q_dim, arch.kv_dim
        attention = (h * q // tp, h * kv // tp, h * kv // tp, q * h // tp)
    else:
        attention = (layer.attention // (4 * tp),) * 4
    moe = layer.mlp != layer.active_mlp
    if moe:
        experts = layer.mlp // ep
        mlp: tuple[int, ...] = (experts * 2 // 3 // tp, experts // 3 // tp)
    elif arch.mlp_gated:
        mlp = (layer.mlp // (3 * tp),) * 3
    else:
        mlp = (layer.mlp // (2 * tp),) * 2
    norms = (layer.norms // max(arch.norms_per_layer, 1),) * arch.norms_per_layer
    return attention + norms[:1], mlp + norms[1:]


class Step(NamedTuple):
    """What the estimator already knows about the step, for :func:`training_pattern`."""

    arch: Architecture
    counts: ParameterCount
    d: Dims
    num: Numerics
    tp: int
    ep: int
    weight_bytes: float
    """Stored bytes per parameter of the layers' weights (quantized formats included)."""

    outer_weight_bytes: float
    """Bytes per parameter of the embedding, final norm and head."""

    load_bytes: float
    """Bytes per parameter of the 16-bit copy each layer weight is loaded through
    before it is quantized (bitsandbytes); 0: loaded as stored."""

    grad_bytes: float
    """Gradient bytes per trainable parameter (0: the base is frozen)."""

    state_bytes: float
    """Optimizer state bytes per trainable parameter, all states together."""

    states: int
    """Optimizer state tensors per trainable tensor."""

    foreach: bool
    adapters: tuple[int, ...]
    """LoRA: one layer's adapter tensors, in elements (fp32)."""

    quantize_steps: tuple[tuple[str, str, float], ...] = ()
    """Quantization after a full load: one weight's recipe (empty: none)."""

    compute_bytes: float = 2.0
    """Bytes per element of the model as loaded before such quantization."""

    head_quantized: bool = False


def _outer(s: Step) -> tuple[int, ...]:
    sizes = (s.counts.embedding // s.tp, s.counts.final, s.counts.head // s.tp)
    return tuple(int(n * s.outer_weight_bytes) for n in sizes if n)


def training_pattern(
    s: Step,
    layer: LayerCost,
    head: HeadCost,
    *,
    checkpointing: str,
    accumulation: int,
) -> Pattern:
    arch, d, m = s.arch, s.d, s.num.matmul
    attention, mlp = layer_tensors(arch, s.counts.layers[-1], s.tp, s.ep)
    lp = s.counts.layers[-1]
    width = (
        d.ffn
        if lp.mlp == lp.active_mlp or arch.moe is None
        else (d.tokens * arch.moe.experts_per_token * arch.moe.expert_intermediate_size)
    )
    unit_h, unit_f = m * d.hidden_full, m * width
    tv = d.logits
    # Autocast keeps a half-precision copy of each weight a linear reads: one request
    # per weight, not activation-sized blocks.
    copies_a = tuple(2 * n for n in attention) if s.num.amp else ()
    copies_m = tuple(2 * n for n in mlp) if s.num.amp else ()
    head_copy = 2 * (s.counts.head or s.counts.embedding) // s.tp if s.num.amp else 0
    if s.grad_bytes:
        grads = tuple(int(n * s.grad_bytes) for n in (*attention, *mlp))
        attention_grads = len(attention)
        outer = (s.counts.embedding // s.tp, s.counts.final, s.counts.head // s.tp)
        outer_grads = tuple(int(n * s.grad_bytes) for n in outer if n)
    else:
        grads = tuple(4 * n for n in s.adapters)
        attention_grads = len(grads) // 2
        outer_grads = ()
    scale = s.state_bytes / s.states / (s.grad_bytes or 4.0) if s.states else 0.0
    return Pattern(
        outer_weights=_outer(s),
        layer_weights=tuple(int(n * s.weight_bytes) for n in (*attention, *mlp)),
        layer_loads=tuple(int(n * s.load_bytes) for n in (*attention, *mlp))
        if s.load_bytes
        else (),
        layers=len(s.counts.layers),
        layer_grads=grads,
        attention_grads=attention_grads,
        outer_grads=outer_grads,
        states_per_grad=s.states,
        state_scale=scale,
        optimizer_temporaries=s.foreach,
        attention_saved=copies_a + _blocks(layer.saved - layer.mlp_saved - sum(copies_a), unit_h),
        mlp_saved=copies_m + _blocks(layer.mlp_saved - sum(copies_m), unit_f),
        attention_backward=_blocks(layer.attention_backward, unit_h),
        mlp_backward=_blocks(layer.mlp_backward, unit_f),
        checkpoint_input=int(
            layer.input
            if checkpointing == "full"
            else (layer.op_saved if checkpointing == "selective_op" else 0)
        ),
        head_saved=((head_copy,) if head_copy else ())
        + _blocks(head.final_saved - head_copy, unit_h),
        logits=int(m * tv),
        upcast=int(max(head.loss_forward - m * tv, 0)),
        loss_saved=int(head.logits_saved),
        loss_backward=_blocks(head.loss_backward, head.logits_saved),
        accumulation=accumulation,
        inference=False,
        kv_per_layer=(),
        forward_transient=(),
    )


def inference_pattern(
    s: Step, layer: LayerCost, *, kv_per_layer: float, last_logits: float
) -> Pattern:
    d, m = s.d, s.num.matmul
    attention, mlp = layer_tensors(s.arch, s.counts.layers[-1], s.tp, s.ep)
    pattern = Pattern(
        outer_weights=_outer(s),
        layer_weights=tuple(int(n * s.weight_bytes) for n in (*attention, *mlp)),
        layer_loads=tuple(int(n * s.load_bytes) for n in (*attention, *mlp))
        if s.load_bytes
        else (),
        layers=len(s.counts.layers),
        layer_grads=(),
        attention_grads=0,
        outer_grads=(),
        states_per_grad=0,
        state_scale=0.0,
        optimizer_temporaries=False,
        attention_saved=(),
        mlp_saved=(),
        attention_backward=(),
        mlp_backward=(),
        checkpoint_input=0,
        head_saved=(),
        logits=int(last_logits),
        upcast=int(FP32 * last_logits / s.num.matmul) if s.num.matmul != FP32 else 0,
        loss_saved=0,
        loss_backward=(),
        accumulation=1,
        inference=True,
        kv_per_layer=_blocks(kv_per_layer, kv_per_layer / 2),
        forward_transient=_blocks(layer.forward_peak, m * d.ffn),
    )
    if not s.quantize_steps:
        return pattern
    tensors = attention + mlp
    return pattern._replace(
        quantize_steps=s.quantize_steps,
        layer_loads=tuple(int(n * s.compute_bytes) for n in tensors),
        layer_elements=tensors,
        head_elements=s.counts.head // s.tp if s.head_quantized else 0,
    )
