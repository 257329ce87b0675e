"""The peak of one steady-state training step, found by walking its timeline.

A step's peak is not the sum of its parts' maxima: activations die during the
backward as gradients are born, and the optimizer's temporaries arrive only after the
activations are gone. The walk evaluates the bytes alive at each moment a peak can
fall (the loss, its backward, the MLP and attention halves of every layer's backward,
the embedding's backward, the optimizer step) and keeps the largest, with what is
alive then as its breakdown.
"""

from gpuplan.core.memory.head import HeadCost
from gpuplan.core.memory.layers import LayerCost
from gpuplan.core.memory.states import ModelStates
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


def training_peak(
    states: ModelStates,
    layers: list[LayerCost],
    grads: list[LayerGrads],
    head: HeadCost,
    *,
    checkpointing: str,
    accumulation_steps: int,
    in_flight: int,
    residual_grad: float,
    head_grads: float,
    tied_embedding_grad: float,
) -> Moment:
    """The largest moment; ``layers`` and ``grads`` in forward order, one per local layer.

    ``in_flight``: micro-batches whose activations one GPU holds at once (1F1B pipeline
    schedules keep up to the pipeline depth on the first stage).
    """
    full = checkpointing == "full"
    kept = [(lc.input if full else lc.saved) * in_flight for lc in layers]
    total_grads = states.gradients
    # After the first micro-step of an accumulation, all gradients exist throughout,
    # and each backward adds a fresh gradient into them.
    accumulating = accumulation_steps > 1
    moments: list[Moment] = []
    activations = sum(kept) + head.embedding_saved + head.final_saved + head.logits_saved
    start = total_grads if accumulating else 0.0
    moments.append(
        Moment(
            phase="forward (loss)",
            gradients=start,
            activations=activations,
            temporary=head.loss_forward + states.gather,
        )
    )
    moments.append(
        Moment(
            phase="backward (loss)",
            gradients=start,
            activations=activations,
            temporary=head.loss_backward + states.gather,
        )
    )
    so_far = total_grads if accumulating else head_grads
    below = sum(kept)
    for index in range(len(layers) - 1, -1, -1):
        lc, lg = layers[index], grads[index]
        below -= kept[index]
        # Under full checkpointing the layer's activations are recomputed just now.
        own = lc.saved + (lc.input if full else 0.0)  # plus the kept input, when recomputing
        fresh_mlp = lg.mlp if accumulating else 0.0
        fresh_attn = lg.attention if accumulating else 0.0
        mlp_grads = so_far + (0.0 if accumulating else lg.mlp)
        moments.append(
            Moment(
                phase="backward (layers)",
                gradients=mlp_grads,
                activations=below + own + head.embedding_saved,
                temporary=residual_grad + lc.mlp_backward + fresh_mlp + states.gather,
            )
        )
        moments.append(
            Moment(
                phase="backward (layers)",
                gradients=mlp_grads + (0.0 if accumulating else lg.attention),
                activations=below + own - lc.mlp_saved + head.embedding_saved,
                temporary=residual_grad + lc.attention_backward + fresh_attn + states.gather,
            )
        )
        if not accumulating:
            so_far += lg.mlp + lg.attention
    moments.append(
        Moment(
            phase="backward (embedding)",
            gradients=total_grads,
            activations=head.embedding_saved,
            temporary=tied_embedding_grad,
        )
    )
    moments.append(
        Moment(
            phase="optimizer step",
            gradients=total_grads,
            activations=0.0,
            temporary=states.optimizer_temporary,
        )
    )
    return max(moments, key=lambda mo: mo.gradients + mo.activations + mo.temporary)
