"""A traced estimate as a terminal table."""

from gpuplan.cli.render.output import size
from gpuplan.core.trace import TraceResult


def table(result: TraceResult) -> str:
    b = result.breakdown
    rows = [
        ("parameters", f"{result.parameters:,} ({result.trainable_parameters:,} trainable)"),
        ("peak (allocated)", f"{size(result.peak_bytes)} in {result.peak_phase}"),
        ("reserved", size(result.reserved_bytes)),
        ("device (nvidia-smi)", size(result.device_bytes)),
        ("required (+20% headroom)", size(result.required_bytes)),
        ("  parameters", size(b.parameters_bytes)),
        ("  gradients", size(b.gradients_bytes)),
        ("  optimizer state", size(b.optimizer_state_bytes)),
        ("  activations", size(b.activations_bytes)),
        ("  temporary", size(b.temporary_bytes)),
        ("  other", size(b.other_bytes)),
        ("peak in forward", size(result.phases.forward_bytes)),
        ("peak in backward", size(result.phases.backward_bytes)),
        ("peak in optimizer", size(result.phases.optimizer_bytes)),
    ]
    if result.new_tokens:
        rows.append((f"peak in decode ({result.new_tokens})", size(result.phases.decode_bytes)))
    lines = [f"{name:<20} {value}" for name, value in rows]
    lines.append("top modules at the peak:")
    lines += [f"  {size(m.bytes):>12}  {m.module}" for m in result.top_modules]
    lines += [f"note: {note}" for note in result.notes]
    lines.append(
        f"traced {result.runtime} {result.mode} step {result.steps} in {result.seconds:.1f} s"
    )
    return "\n".join(lines) + "\n"
