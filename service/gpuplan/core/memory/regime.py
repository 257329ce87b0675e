"""The regimes of a memory estimate: what its cross-validated errors are grouped by.

One function, used by the estimate (to draw its intervals) and by ``bench/accuracy`` (to
group the published cases' residuals), so a case and a request land in the same regime
by the same rule.
"""

from gpuplan.core.memory.schema import Workload


def memory_regime(w: Workload) -> dict[str, str]:
    """The job's mode, how it is split over GPUs and its weights' quantization.

    Not the framework: naming the framework a job already follows by default must not
    change how sure its estimate is."""
    p = w.parallelism
    if max(p.tensor, p.pipeline, p.context, p.expert) > 1:
        split = "model_parallel"
    elif p.zero_stage > 0 or (p.framework == "fsdp1" and p.data > 1):
        # FSDP1 shards fully at zero_stage 0 as well (its FULL_SHARD default).
        split = "sharded"
    elif p.data > 1:
        split = "data_parallel"
    else:
        split = "single"
    return {
        "mode": w.mode,
        "split": split,
        "quantization": w.weight_quantization,
    }
