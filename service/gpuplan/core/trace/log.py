"""The allocation log a trace records: the interface between torch and the core.

A log is a flat list of small integer tuples rather than a list of Structs: a 7B
training step is a few thousand events, a larger model tens of thousands, and tuples
keep recording cheap for the tracer and replaying cheap for the analysis.
"""

from enum import IntEnum

from gpuplan.core.record import Record


class Op(IntEnum):
    ALLOC = 0
    """``(ALLOC, storage, nbytes, category, owner)``: a storage of ``nbytes`` appears."""

    FREE = 1
    """``(FREE, storage, 0, 0, 0)``: the storage is released."""

    RETAG = 2
    """``(RETAG, storage, 0, category, owner)``: a live storage changes role, e.g. a
    tensor the autograd engine produced becomes a parameter's ``.grad``."""

    PHASE = 3
    """``(PHASE, 0, 0, phase, 0)``: the step enters ``phase``."""


class Category(IntEnum):
    """What a storage holds; the breakdown's rows."""

    PARAMETERS = 0
    GRADIENTS = 1
    OPTIMIZER_STATE = 2
    ACTIVATIONS = 3
    """Created during a forward pass (including a checkpoint's recomputation)."""
    TEMPORARY = 4
    """Created during backward or the optimizer step and not kept as a gradient or state."""
    OTHER = 5
    """Buffers, inputs and anything alive before the steps."""


class Phase(IntEnum):
    BUILD = 0
    """Building the model and its inputs."""
    WARMUP = 1
    """Steps before the measured one (they create the optimizer state)."""
    FORWARD = 2
    BACKWARD = 3
    OPTIMIZER = 4
    END = 5
    """After the measured step."""
    DECODE = 6
    """Inference: greedy decode steps after the prefill, each growing the KV cache."""


Event = tuple[int, int, int, int, int]


class TraceLog(Record):
    """Everything the tracer saw, in order."""

    events: list[Event]
    owners: list[str]
    """Module names that ``owner`` fields index into; index 0 is the unattributed owner."""

    parameters: int
    trainable_parameters: int
    device: str = "cpu"
