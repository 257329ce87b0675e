"""FSDP1's flat parameters: what each unit holds on one GPU, and when.

PyTorch's ``FullyShardedDataParallel`` (read at torch 2.13.0, commit cf30153c4c13;
``torch/distributed/fsdp/_flat_param.py``, ``_runtime_utils.py``, ``_limiter_utils.py``,
``fully_sharded_data_parallel.py``) flattens each unit's parameters into one
``FlatParameter``:

* **Shards.** The flat parameter is split into equal chunks, one per rank, the last one
  padded (``_get_shard``; with ``use_orig_params`` the flat parameter itself is padded
  "to be divisible by world size to avoid a copy for the post-backward
  reduce-scatter"). A rank keeps its chunk in the parameters' own dtype: fp32 under
  ``MixedPrecision(param_dtype=bf16)``, where the fp32 shard is also the optimizer's
  parameter.
* **Gathers.** ``unshard`` all-gathers the padded unsharded flat parameter in
  ``param_dtype`` (``_full_param_padded``). Under ``FULL_SHARD`` a unit is freed after
  its forward (``_post_forward_reshard``) except the root, whose parameters stay
  gathered "with the intention that they are immediately used for backward", and again
  after its backward. With ``BackwardPrefetch.BACKWARD_PRE`` a unit's pre-backward hook
  gathers the next one before its own gradients are computed. No unit is gathered
  ahead in the forward (``forward_prefetch=False``): the rate limiter
  (``limit_all_gathers``, at most two in flight, ``_FreeEventQueue``) bounds how far
  the CPU runs ahead on a GPU, but every free is issued before the next gather is
  allocated, which is what ``max_memory_allocated`` counts.
* **Gradients.** The original parameters are views into the flat parameter, so
  autograd builds the unit's whole flat gradient by concatenating every view's
  gradient (the views come from ``torch.split``, whose backward concatenates): for a
  moment the per-parameter gradients and the flat one coexist. The post-backward hook
  casts it to ``reduce_dtype`` if that differs (``flat_param.grad.to(reduce_dtype)``),
  reduce-scatters it into a new shard and casts that to the parameter dtype
  (``_cast_grad_to_param_dtype``): the shard is kept, fp32 under mixed precision, until
  the next forward's ``_clear_grads_if_needed``.
* **Frozen parameters.** With ``use_orig_params`` a unit may mix frozen and trainable
  parameters; the flat parameter then requires grad, every view with it, so every
  weight's gradient is computed and the whole flat gradient is reduced and kept (its
  docstring: "higher than expected gradient memory usage").
"""

from gpuplan.core.memory.numerics import DTYPE_BYTES, half_dtype
from gpuplan.core.memory.parameters import ParameterCount
from gpuplan.core.memory.schema import Workload
from gpuplan.core.record import Record


def param_dtype(w: Workload) -> str:
    """The dtype a unit is gathered and computed in (``MixedPrecision.param_dtype``)."""
    if w.precision.startswith("amp_"):
        return w.parallelism.fsdp1.param_dtype or half_dtype(w.precision)
    return "fp32" if w.precision == "fp32" else half_dtype(w.precision)


def gather_bytes(w: Workload) -> float:
    return float(DTYPE_BYTES[param_dtype(w)])


def default_reduce_dtype(w: Workload) -> str:
    """``MixedPrecision.reduce_dtype`` as the front ends set it: the precision's half
    under mixed precision (accelerate's ``set_mixed_precision``: ``param_dtype`` and
    ``reduce_dtype`` the same dtype; Lightning's ``bf16-mixed``: ``reduce_dtype =
    torch.bfloat16``), else the parameters' own dtype."""
    return "fp32" if w.precision == "fp32" else half_dtype(w.precision)


def padded_shard(numel: float, ranks: int) -> float:
    """Elements of one rank's chunk of a flat parameter of ``numel`` elements."""
    return float(-(-int(numel) // ranks)) if ranks > 1 else float(numel)


def adapters_in_layers(w: Workload) -> bool:
    """LoRA adapters sharing their layer's flat parameter (so the whole layer trains)."""
    return (
        w.mode in ("finetune_lora", "finetune_qlora")
        and w.parallelism.fsdp1.adapters == "in_layer_units"
    )


def without_sync(w: Workload) -> bool:
    """Micro-batches before the last accumulate unsharded gradients (``no_sync()``)."""
    return (
        w.mode != "inference"
        and w.gradient_accumulation_steps > 1
        and w.parallelism.fsdp1.accumulate_without_sync
    )


class Units(Record, kw_only=True):
    """A model's FSDP1 units on one GPU: parameters per unit (after tensor parallelism)."""

    layers: list[float]
    """Each decoder layer's unit (one per local layer), adapters inside included."""

    root: float
    """Embeddings, final norm and head: the root unit, gathered from its forward to the
    end of the backward."""

    head: float
    """The head's parameters (the embedding's when tied): their gradient is computed in
    the loss's backward and waits there for the root's flat gradient."""

    embedding: float


def units(counts: ParameterCount, *, tp: int, local_layers: int, in_layer_adapters: float) -> Units:
    """The units of ``counts`` as accelerate's ``transformer_based_wrap`` and Lightning's
    ``auto_wrap_policy={Block}`` make them."""
    layers = [
        (lp.attention + lp.mlp) / tp + lp.norms + in_layer_adapters
        for lp in counts.layers[:local_layers]
    ]
    head = counts.head or counts.embedding
    return Units(
        layers=layers,
        root=(counts.embedding + counts.head + counts.final) / tp,
        head=head / tp,
        embedding=counts.embedding / tp,
    )


def shard_elements(u: Units, ranks: int) -> float:
    """Elements this rank keeps of every unit, padding included."""
    return sum(padded_shard(n, ranks) for n in u.layers) + padded_shard(u.root, ranks)


def flat_gradient(unit: float, w: Workload, reduce_dtype: str) -> float:
    """Bytes a unit's backward holds at its end to reduce its gradient: the views'
    gradients beside the flat one they are concatenated into, then the flat gradient
    beside its ``reduce_dtype`` copy (when that differs), and the reduce-scatter's
    padded input and output shards."""
    p = DTYPE_BYTES[param_dtype(w)]
    r = DTYPE_BYTES[reduce_dtype]
    ranks = w.parallelism.data * w.parallelism.context
    cast = r if r != p else 0
    # use_orig_params=False pads only the shard: the reduce-scatter's input is a padded
    # copy (F.pad) when the flat parameter does not divide by the ranks.
    pad = r * unit if not w.parallelism.fsdp1.use_orig_params and int(unit) % ranks else 0.0
    out = padded_shard(unit, ranks) * r
    return max(2.0 * p * unit, p * unit + cast * unit + pad + out)


class Gathers(Record, kw_only=True):
    """Bytes of gathered (unsharded) units alive at each moment of a step."""

    forward: float
    """At the loss's forward: the root (and, under ``SHARD_GRAD_OP``, every layer)."""

    loss_backward: float
    """At the loss's backward: the root's pre-backward hook prefetches the last layer."""

    layers: float
    """During a layer's backward: the root, the layer and (prefetched) the one below."""

    bottom: float
    """During the first layer's backward: nothing below it to prefetch."""

    root: float
    """At the embedding's backward, and while the root's gradient is reduced."""


def gathers(
    u: Units, w: Workload, *, ranks: int, stored: float, layer_bytes: float, stage: int
) -> Gathers:
    """Where the gathered units are (module docstring). ``layer_bytes``: bytes per
    gathered layer parameter (``param_dtype``'s, or a quantized format's)."""
    gathered = gather_bytes(w)
    # NO_SHARD (one rank) computes on the flat parameter itself unless it casts it.
    if ranks == 1 and gathered == stored:
        return Gathers(forward=0.0, loss_backward=0.0, layers=0.0, bottom=0.0, root=0.0)
    root = padded_shard(u.root, ranks) * ranks * gathered
    unit = padded_shard(max(u.layers, default=0.0), ranks) * ranks * layer_bytes
    prefetch = 1.0 if w.parallelism.fsdp1.backward_prefetch == "backward_pre" else 0.0
    # Adapters wrapped on their own come between two layers in the backward order: a
    # layer's pre-backward prefetches its last adapter, and the layer below is gathered
    # only at its first adapter's, at the end of its attention's backward.
    between = w.mode in ("finetune_lora", "finetune_qlora") and not adapters_in_layers(w)
    layers = (1.0 + (0.0 if between else prefetch)) * unit
    if stage == 2:
        # SHARD_GRAD_OP: every layer stays gathered from its forward to its backward.
        every = sum(u.layers) * layer_bytes
        return Gathers(
            forward=root + every,
            loss_backward=root + every,
            layers=root + max(layers, every),
            bottom=root + max(layers, every),
            root=root,
        )
    return Gathers(
        forward=root,
        loss_backward=root + prefetch * unit,
        layers=root + layers,
        bottom=root + min(layers, unit),
        root=root,
    )
