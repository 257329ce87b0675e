"""The peak of one steady-state training step, found by walking its timeline.

A step's peak is not the sum of its parts' maxima: activations die during the
backward as gradients are born, and the optimizer's temporaries arrive only after the
activations are gone. The walk evaluates the bytes alive at each moment a peak can
fall (the loss, its backward, the MLP and attention halves of every layer's backward,
the embedding's backward, the optimizer step) and keeps the largest, with what is
alive then as its breakdown.
"""

from gpuplan.core.memory.head import HeadCost
from gpuplan.core.memory.layers_records import LayerCost
from gpuplan.core.memory.states_records import ModelStates
from gpuplan.core.memory.training_records import LayerGrads, Moment


def training_peak(
    states: ModelStates,
    layers: list[LayerCost],
    grads: list[LayerGrads],
    head: HeadCost,
    *,
    checkpointing: str,
    accumulation_steps: int,
    in_flight: float,
    residual_grad: float,
    head_grads: float,
    tied_embedding_grad: float,
    every: int = 1,
    held: float = 0.0,
    offload_layers: int = 0,
    in_backward: float = -1.0,
    in_backward_layer: float = 0.0,
    persistent_gradients: bool = False,
) -> Moment:
    """The largest moment; ``layers`` and ``grads`` in forward order, one per local layer.

    ``in_flight``: micro-batches whose activations one GPU holds at once (1F1B pipeline
    schedules keep up to the pipeline depth on the first stage). ``held``: bytes the loop
    keeps from the forward to the end of the step (the model's outputs), alive at every
    moment of the backward, the layers' included. ``offload_layers``: the first this many
    layers' saved activations wait in CPU memory; a layer's come back for its backward,
    the next one's prefetched during the backward of the layer above it (the first layer
    kept on the GPU included). ``in_backward`` >= 0: the optimizer steps each gradient in
    the backward (these bytes of temporaries at a time), so gradients do not pile up;
    ``in_backward_layer``: the same for a layer's largest weight, stepped inside the
    layer's backward: an MLP weight's gradient hook (``AccumulateGrad`` runs as soon as
    the weight's matmul backward made it) steps it while the MLP's activations are alive.
    ``persistent_gradients``: the gradients live in one buffer allocated once and zeroed
    between steps (Megatron-core's contiguous main-gradient buffer), into which the
    weight-gradient GEMMs accumulate (``gradient_accumulation_fusion``): every gradient
    byte exists from the step's start, and none is born as a separate tensor.
    """
    checkpointed_any = checkpointing in ("full", "selective_op")
    kept = _kept(layers, checkpointing, every, in_flight, offload_layers=offload_layers)
    stepping = in_backward >= 0
    total_grads = 0.0 if stepping else states.gradients
    # After the first micro-step of an accumulation, all gradients exist throughout,
    # and each backward adds a fresh gradient into them.
    accumulating = accumulation_steps > 1 or persistent_gradients
    activations = sum(kept) + head.embedding_saved + head.final_saved + head.logits_saved
    start = total_grads if accumulating else 0.0
    # FSDP1: the root unit's unsharded gradients (the head's) wait from the loss's
    # backward for the embedding's, and the root stays gathered throughout.
    root = states.root_gradient
    reduce_mlp = states.reduce if states.reduce_mlp is None else states.reduce_mlp
    so_far = total_grads if accumulating else (0.0 if stepping else head_grads)
    step_temp = max(in_backward, 0.0)
    moments: list[Moment] = [
        *_loss_moments(states, head, start=start, activations=activations, held=held),
        *_final_norm_moment(states, head, so_far, activations, root + held),
    ]
    below = sum(kept)
    layer_peak: tuple[float, tuple[float, float, float]] = (-1.0, (0.0, 0.0, 0.0))
    # The backward walks the layers top-down. Along a run of identical layers every
    # moment's total changes by the same amount per layer (activations released,
    # gradients born), so it is monotonic and its maximum lies at an end of the run:
    # evaluating the ends is exact, and keeps a 126-layer estimate cheap.
    index = len(layers) - 1
    for run in _runs(layers, grads, kept):
        ends = {index, index - run + 1}
        if (states.gather_bottom is not None or offload_layers > 0) and index - run < 1 <= index:
            # The first layer gathers less, or prefetches no next layer's activations:
            # the run's total bends before it.
            ends.add(1)
        for position in sorted(ends, reverse=True):
            skipped = index - position  # identical layers already walked in this run
            lc, lg = layers[position], grads[position]
            below_here = below - kept[position] * (skipped + 1)
            done = so_far + (0.0 if accumulating or stepping else (lg.mlp + lg.attention) * skipped)
            # A checkpointed layer's activations are recomputed now: all of them beside
            # what it kept (its input under full checkpointing; under the op policy the
            # kept outputs are among them).
            recomputed = checkpointed_any and position % every == 0
            own = lc.saved + (lc.input if recomputed and checkpointing == "full" else 0.0)
            if 0 < position <= offload_layers:
                own += layers[position - 1].saved  # the next layer's, prefetched
            gather = (
                states.gather_bottom
                if position == 0 and states.gather_bottom is not None
                else states.gather
            )
            fresh_mlp = lg.mlp if accumulating and not persistent_gradients else 0.0
            fresh_attn = lg.attention if accumulating and not persistent_gradients else 0.0
            mlp_grads = done + (0.0 if accumulating or stepping else lg.mlp)
            at_mlp_peak = done + (0.0 if accumulating or stepping else lg.mlp_at_peak())
            # The MLP half of the layer's backward, then its attention half, then (FSDP1)
            # its flat gradient assembled once its activations are freed.
            # (The layer's shard is born after this moment: states.reduce_end holds it.)
            layer_done = (
                mlp_grads,
                below_here + head.embedding_saved,
                residual_grad + gather + states.reduce_end + root + held,
            )
            for moment in (
                (
                    at_mlp_peak,
                    below_here + own + head.embedding_saved,
                    residual_grad
                    + max(lc.mlp_backward, in_backward_layer if stepping else 0.0)
                    + fresh_mlp
                    + gather
                    + reduce_mlp
                    + root
                    + held,
                ),
                (
                    mlp_grads + (0.0 if accumulating else lg.attention),
                    below_here + own - lc.mlp_saved + head.embedding_saved,
                    residual_grad
                    + lc.attention_backward
                    + fresh_attn
                    + gather
                    + states.reduce
                    + root
                    + held,
                ),
                *((layer_done,) if states.reduce_end else ()),
            ):
                total = moment[0] + moment[1] + moment[2]
                if total > layer_peak[0]:
                    layer_peak = (total, moment)
        below -= kept[index] * run
        if not accumulating and not stepping:
            so_far += (grads[index].mlp + grads[index].attention) * run
        index -= run
    if layer_peak[0] >= 0:
        g, a, t = layer_peak[1]
        moments.append(Moment(phase="backward (layers)", gradients=g, activations=a, temporary=t))
    moments.append(
        Moment(
            phase="backward (embedding)",
            gradients=total_grads,
            activations=head.embedding_saved,
            temporary=tied_embedding_grad + held + step_temp + states.gather_embedding + root,
        )
    )
    moments.extend(_step_end(states, total_grads, held=held, stepping=stepping))
    return max(moments, key=lambda mo: mo.gradients + mo.activations + mo.temporary)


def _loss_moments(
    states: ModelStates, head: HeadCost, *, start: float, activations: float, held: float
) -> list[Moment]:
    """The loss's forward and backward, with what is gathered then (FSDP1: the root,
    and in the backward the last layer its pre-backward hook prefetches)."""
    gather_forward = states.gather if states.gather_forward is None else states.gather_forward
    gather_loss = (
        states.gather if states.gather_loss_backward is None else states.gather_loss_backward
    )
    return [
        Moment(
            phase="forward (loss)",
            gradients=start,
            activations=activations,
            temporary=head.loss_forward + gather_forward,
        ),
        Moment(
            phase="backward (loss)",
            gradients=start,
            activations=activations,
            temporary=head.loss_backward + gather_loss + held,
        ),
    ]


def _final_norm_moment(
    states: ModelStates, head: HeadCost, grads: float, activations: float, held: float
) -> list[Moment]:
    """The final norm's backward (when it is a moment of its own): the loss's saved
    tensors are gone, the head's gradient is born, and (FSDP1) the root and the last
    layer its pre-backward hook prefetched are gathered."""
    if not head.norm_backward:
        return []
    gather = states.gather if states.gather_loss_backward is None else states.gather_loss_backward
    return [
        Moment(
            phase="backward (final norm)",
            gradients=grads,
            activations=activations - head.logits_saved,
            temporary=head.norm_backward + gather + held,
        )
    ]


def _step_end(
    states: ModelStates, total_grads: float, *, held: float, stepping: bool
) -> list[Moment]:
    """After the layers: FSDP1's root unit reducing its gradient (every gradient of it
    concatenated into its flat one), then the optimizer step (unless it ran in the
    backward), with the gradients it reads."""
    moments = []
    if states.root_reduce:
        moments.append(
            Moment(
                phase="backward (root unit's gradient)",
                gradients=total_grads,
                activations=0.0,
                temporary=held + states.gather_embedding + states.root_reduce,
            )
        )
    if not stepping:
        step_grads = total_grads if states.step_gradients is None else states.step_gradients
        moments.append(
            Moment(
                phase="optimizer step",
                gradients=step_grads,
                activations=0.0,
                temporary=states.optimizer_temporary + held,
            )
        )
    return moments


def _kept(
    layers: list[LayerCost],
    checkpointing: str,
    every: int,
    in_flight: float,
    *,
    offload_layers: int = 0,
) -> list[float]:
    """Bytes each layer keeps from its forward to its backward. Checkpointed layers (one
    in ``every``) keep their input (full) or the op policy's outputs (selective_op) and
    hold all their activations again in their backward; offloaded ones (the first
    ``offload_layers``) keep nothing here."""
    if checkpointing == "full":
        kept = [
            (lc.input if i % every == 0 else lc.saved) * in_flight for i, lc in enumerate(layers)
        ]
    elif checkpointing == "selective_op":
        kept = [
            (lc.op_saved if i % every == 0 else lc.saved) * in_flight for i, lc in enumerate(layers)
        ]
    else:
        kept = [lc.saved * in_flight for lc in layers]
    return [0.0] * min(offload_layers, len(kept)) + kept[offload_layers:]


def _runs(layers: list[LayerCost], grads: list[LayerGrads], kept: list[float]) -> list[int]:
    """The lengths of the runs of identical layers (cost, gradients and kept bytes), from
    the top layer down: the backward's order. The estimate hands a run's layers the same
    records, so identity decides most comparisons."""
    runs: list[int] = []
    index = len(layers) - 1
    while index >= 0:
        cost, grad, keeps = layers[index], grads[index], kept[index]
        run = 1
        while index - run >= 0:
            other, other_grad = layers[index - run], grads[index - run]
            if not (
                (other is cost or other == cost)
                and (other_grad is grad or other_grad == grad)
                and kept[index - run] == keeps
            ):
                break
            run += 1
        runs.append(run)
        index -= run
    return runs
