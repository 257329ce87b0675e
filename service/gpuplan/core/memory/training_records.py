"""What a training step's memory walk reads and returns: the gradient bytes each layer's
backward creates, and what is alive at one instant.

Kept apart from :mod:`gpuplan.core.memory.training`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

from gpuplan.core.record import Record


class Moment(Record, kw_only=True):
    """What is alive at one instant of the step."""

    phase: str
    gradients: float
    activations: float
    temporary: float


class LayerGrads(Record, kw_only=True):
    """Gradient bytes one layer's backward creates: first its MLP's, then the rest."""

    mlp: float
    attention: float
    mlp_last: float = -1.0
    """The part of ``mlp`` born by the MLP half's peak: its last linear's gradient (the
    activation's backward, where the peak falls, runs before the first linear's). -1:
    all of ``mlp``."""

    def mlp_at_peak(self) -> float:
        return self.mlp if self.mlp_last < 0 else self.mlp_last
