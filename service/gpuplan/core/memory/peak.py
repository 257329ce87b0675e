"""The moment of a step with the most memory alive, beyond the model states.

Training, inference and the measured vision profiles each find their peak their own
way; they all answer with this one record, so the estimate compares and reports
them without converting one shape into another.
"""

from gpuplan.core.record import Record


class Peak(Record, kw_only=True):
    """What is alive at the peak, beyond the model states."""

    gradients: float
    activations: float
    temporary: float
    kv_cache: float
    phase: str
    allocator_gap: float = 0.0
    """``max_memory_reserved - max_memory_allocated`` from the allocator replay."""

    without_optimizer: bool = False
    """The moment precedes the optimizer (a model being built): no optimizer states or
    master copy exist yet."""

    def alive(self) -> float:
        """Bytes alive at this moment beyond the model states (what a peak maximizes)."""
        return self.gradients + self.activations + self.temporary + self.kv_cache
