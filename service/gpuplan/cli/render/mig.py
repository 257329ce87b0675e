"""A MIG partition as a terminal table: each GPU's instances, then what applies them.

The answer of ``POST /v1/mig/plan`` is a few hundred lines of JSON for four GPUs; a
person planning a node wants the GPUs and their instances, whether that is the fewest
GPUs, what was left out, and the Kubernetes resources each workload requests (with the
device plugin's strategy and the DRA templates when the request asks for them). The
mig-parted config, the DRA objects and the whole answer stay one ``--output`` away.
"""

from gpuplan.cli.render.output import GiB
from gpuplan.core.mig.schema import PartitionResponse


def table(r: PartitionResponse) -> str:
    n = r.gpus_used
    if r.optimal:
        fewest = "the fewest that hold these workloads"
    else:
        fewest = f"not proven the fewest: no plan uses fewer than {r.lower_bound}"
    lines = [f"{r.gpu} (MIG table {r.table}): {n} GPU{'s' if n != 1 else ''}, {fewest}"]
    for g in r.gpus:
        order = f"  create in this order: {', '.join(g.creation_order)}" if g.creation_order else ""
        lines.append(f"gpu {g.index}  {g.layout}{order}")
        for i in g.instances:
            use = " (in use)" if i.in_use else ""
            lines.append(
                f"    slot {i.start}  {i.profile:<11} {i.memory_bytes / GiB:7.2f} GiB  "
                f"{i.workload or '-'}{use}"
            )
        if g.stranded_compute_slices:
            lines.append(f"    {g.stranded_compute_slices} compute slice(s) stranded")
    u = r.utilization
    lines.append(
        f"slices used: memory {u.memory_slices_used} of {u.memory_slices_total}, compute "
        f"{u.compute_slices_used} of {u.compute_slices_total} ({u.compute_slices_stranded} "
        "stranded)"
    )
    for rep in r.repartition:
        create = ", ".join(f"{p.profile}@{p.start}" for p in rep.create) or "nothing"
        destroy = ", ".join(f"{p.profile}@{p.start}" for p in rep.destroy) or "nothing"
        lines.append(f"repartition gpu {rep.index}: create {create}; destroy {destroy}")
    lines += [f"unplaced: {u.count} x {u.workload}: {u.reason}" for u in r.unplaced]
    if r.resources:
        lines.append("Kubernetes resources (device plugin migStrategy mixed):")
        workloads = list(dict.fromkeys(res.workload for res in r.resources))
        width = max(len(w) for w in workloads)
        for w in workloads:
            asks = ", ".join(f"{x.resource} x{x.count}" for x in r.resources if x.workload == w)
            lines.append(f"  {w:<{width}}  {asks}")
    lines += _shared(r)
    s = r.single_strategy
    if s.possible:
        lines.append(f"migStrategy single: possible; {s.reason}")
    else:
        alternative = (
            f"; {s.alternative_profile} alone would serve every workload on "
            f"{s.alternative_gpus} GPUs"
            if s.alternative_profile is not None
            else ""
        )
        lines.append(f"migStrategy single: not possible; {s.reason}{alternative}")
    lines += _asked(r)
    if r.unverified:
        lines.append(f"unverified on hardware: {', '.join(r.unverified)}")
    lines.append(
        "--output mig-parted prints the nvidia-mig-parted config, --output dra the DRA "
        "ResourceClaimTemplates (--write FILE saves either); --output json the whole answer"
    )
    return "\n".join(lines) + "\n"


def _shared(r: PartitionResponse) -> list[str]:
    """The tier below MIG: each shared workload's host, replicas and limits."""
    if r.sharing is None:
        return []
    sh = r.sharing
    lines = ["Shared below MIG (pods request 1 of the resource; limits per client):"]
    width = max((len(w.workload) for w in sh.workloads), default=0)
    for w in sh.workloads:
        mps = (
            f", {w.active_thread_percentage}% active threads"
            if w.active_thread_percentage is not None
            else ""
        )
        lines.append(
            f"  {w.workload:<{width}}  {w.mode}  {w.count} on {w.resource} (replicas {w.replicas}), "
            f"limit {w.memory_limit_bytes / GiB:.2f} GiB{mps}"
        )
    if sh.whole_gpus:
        lines.append(f"  + {sh.whole_gpus} whole GPU(s) with MIG disabled for MPS")
    if r.device_plugin is not None:
        lines += [
            f"  device plugin config {c.name}: {c.applies_to}" for c in r.device_plugin.sharing
        ]
    return lines


def _asked(r: PartitionResponse) -> list[str]:
    """The outputs the request asked for beyond the config: strategy, DRA templates."""
    lines = []
    if r.device_plugin is not None:
        lines.append(f"device plugin: set migStrategy {r.device_plugin.strategy}")
    if r.dra is not None:
        lines.append(f"DRA ({r.dra.driver}, {r.dra.api_version}) ResourceClaimTemplates:")
        width = max((len(t.name) for t in r.dra.claim_templates), default=0)
        lines += [
            f"  {t.name:<{width}}  {t.device_class_name} {t.profile}, one per pod, {t.pods} pod(s)"
            for t in r.dra.claim_templates
        ]
    return lines
