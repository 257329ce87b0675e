"""Per-GPU memory of the job at a given GPU count, sized as the recommendation sizes it.

``fits: {gpu, count}`` asks whether the job runs on ``count`` GPUs of a model. The
answer uses the recommendation's own layouts at that count (training: DDP, ZeRO-2,
ZeRO-3, tensor parallel in the node + ZeRO-3, tensor × pipeline; inference: a replica
tensor-parallel over 1, 2, 4 or 8 GPUs, the rest replicas) and its memory oracle, so
a target and a recommendation never disagree about the same layout. Of those layouts
the one needing the least memory per GPU is reported: the job fits ``count`` GPUs
exactly when that one fits, and its headroom is the most the count allows.
"""

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.recommend.context import TP_DEGREES
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.schema import Constraints, ParallelLayout
from gpuplan.core.recommend.training import training_ladder
from gpuplan.core.record import Record


class Sized(Record, kw_only=True):
    layout: ParallelLayout
    replicas: int
    """Inference: independent copies of the tensor-parallel replica (1 for training)."""

    required_bytes: int


def layouts_at(job: Job, count: int, c: Constraints) -> list[tuple[ParallelLayout, int]]:
    """``(layout sized, replicas)`` the recommendation would consider at ``count`` GPUs."""
    if job.kind != "inference":
        # Every layout of the ladder uses every GPU (tensor x pipeline x data x context).
        return [
            (lay, 1)
            for lay in training_ladder(job, count, c)
            if lay.tensor * lay.pipeline * lay.data * lay.context == count
        ]
    arch = job.arch
    out = [(ParallelLayout(tensor=1, pipeline=1, data=1, zero_stage=0), count)]
    for t in TP_DEGREES:
        if (
            t <= count
            and count % t == 0
            and t <= c.gpus_per_node
            and arch is not None
            and arch.num_heads % t == 0
        ):
            out.append((ParallelLayout(tensor=t, pipeline=1, data=1, zero_stage=0), count // t))
    return out


def size_at(
    job: Job, oracle: MemoryOracle, gpu: GpuSpec, count: int, c: Constraints
) -> Sized | None:
    """The least per-GPU ``required_bytes`` over the layouts at ``count``; None: none sized."""
    best: Sized | None = None
    for layout, replicas in layouts_at(job, count, c):
        laid, key = oracle.laid_out(job.workload, layout)
        required = oracle.required(laid, gpu, key)
        if required is None:
            continue
        if best is None or required < best.required_bytes:
            best = Sized(layout=layout, replicas=replicas, required_bytes=required)
    return best


def describe(sized: Sized) -> str:
    lay = sized.layout
    if sized.replicas > 1:
        return f"t{lay.tensor}p{lay.pipeline}x{sized.replicas} replicas"
    return f"t{lay.tensor}p{lay.pipeline}d{lay.data}z{lay.zero_stage}"
