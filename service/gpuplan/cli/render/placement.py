"""A placement answer as a terminal table: the options, fewest disruptions first, then
the first one's commands and the notes.

A person placing one workload wants where it goes, what that disturbs and what to run;
the layouts after each option and the whole answer stay one ``--output json`` away.
"""

from gpuplan.cli.render.output import GiB
from gpuplan.core.mig.schema import PlacementOption, PlacementResponse

HEAD = ("#", "disruption", "node", "gpu", "profile", "start", "changes", "usable", "resource")


def _changes(o: PlacementOption) -> str:
    if o.action == "enable-mig":
        return "enable MIG"
    parts = []
    if o.drained:
        parts.append(f"drain {o.drained}")
    if o.destroyed:
        parts.append(f"destroy {o.destroyed} idle")
    if o.action == "create":
        parts.append("create")
    return ", ".join(parts) or "nothing"


def table(r: PlacementResponse) -> str:
    wanted = (
        f"profile {r.profile}"
        if r.profile is not None
        else f"{r.memory_bytes / GiB:.2f} GiB, {r.compute_slices} compute slice(s)"
    )
    lines = [f"workload: {wanted}; {r.nodes} live node(s), {r.gpus} GPU(s)"]
    lines.append(f"{r.disruption or 'no placement'}: {r.reason}")
    if r.options:
        rows = [
            (
                str(n),
                o.disruption,
                o.node,
                str(o.gpu_index),
                o.profile or "whole GPU",
                "-" if o.placement_start is None else str(o.placement_start),
                _changes(o),
                f"{o.memory_bytes / GiB:.2f} GiB",
                o.resource,
            )
            for n, o in enumerate(r.options, 1)
        ]
        head = HEAD
        widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
        for row in [head, *rows]:
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines.append("first option, step by step:")
        lines += [f"  {n}. {step}" for n, step in enumerate(r.options[0].steps, 1)]
    if r.matched > r.count:
        lines.append(f"{r.matched - r.count} more option(s): --limit")
    lines += [f"note: {note}" for note in r.notes]
    return "\n".join(lines) + "\n"
