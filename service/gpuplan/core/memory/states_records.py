"""The model states on one GPU, and the bytes per parameter they are counted from.

Kept apart from :mod:`gpuplan.core.memory.states`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

from gpuplan.core.record import Record


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
    """ZeRO-3 / FSDP all-gather buffers for the layers being computed, and a framework's
    persistent communication buffers (DeepSpeed's reduce bucket)."""

    reduce: float = 0.0
    """Bytes a layer's backward adds to reduce its gradients (FSDP2: the unsharded
    gradients in the compute dtype and their fp32 copy for reduce-scatter)."""

    largest_layer: float
    """Bytes of the largest layer's weights in compute precision."""

    reduce_mlp: float | None = None
    """What the MLP half of a layer's backward adds to reduce gradients, where it
    differs from ``reduce`` (FSDP1: the MLP weights' unsharded gradients, before the
    layer's flat gradient is assembled at its end)."""

    reduce_end: float = 0.0
    """Bytes a layer's gradients take once its backward is done and its activations are
    freed (FSDP1: the views' gradients beside the flat gradient they are concatenated
    into, then its reduce-dtype copy and the reduce-scatter's shards)."""

    gather_forward: float | None = None
    """Gathered parameters at the loss's forward, where they differ from ``gather``
    (FSDP1: the root unit; no layer is gathered ahead in the forward)."""

    gather_loss_backward: float | None = None
    """Gathered parameters at the loss's backward, where they differ from ``gather``
    (FSDP1: the root unit and the last layer, prefetched by ``BACKWARD_PRE``)."""

    gather_embedding: float = 0.0
    """Gathered parameters at the embedding's backward (FSDP1: the root unit)."""

    gather_bottom: float | None = None
    """Gathered parameters during the first layer's backward, where they differ from
    ``gather`` (FSDP1: no layer below it to prefetch)."""

    root_gradient: float = 0.0
    """Unsharded gradient bytes the root unit holds from the loss's backward until its
    flat gradient is built at the end of the backward (FSDP1: the head's)."""

    root_reduce: float = 0.0
    """Bytes the root unit's post-backward holds to reduce its flat gradient (FSDP1)."""

    step_gradients: float | None = None
    """Gradient bytes at the optimizer step, where they differ from ``gradients`` (FSDP1
    under ``no_sync()``: unsharded through the backward, shards at the step)."""

    init_extra: float = 0.0
    """Bytes beside the unsharded model while a materialized model is wrapped (FSDP1:
    the flat copy of the unit being flattened)."""


class StateBytes(Record, kw_only=True):
    """Bytes per parameter of each model state, before any sharding."""

    weights: float
    grads: float
    states: float
    master: float
    grad_partition: float = 0.0
    """The fp32 gradients of the rank's partition, built for the optimizer step
    (DeepSpeed; Megatron with a half-precision gradient buffer)."""
