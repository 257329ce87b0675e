"""Memory a job uses outside its tensors: CUDA/ROCm context, library workspaces,
NCCL buffers and the caching allocator's slack.

Tensor accounting (``torch.cuda.max_memory_allocated``) sees none of this, and
``nvidia-smi`` sees all of it. Figures and their sources (shared/reference/memory.md
§4); none could be re-measured on a GPU for this release, so each is reported as an
assumption.
"""

from gpuplan.core.record import Record

MiB = 1 << 20

# PyTorch PR #86509: 287,047,680 B with lazy module loading (default since CUDA 11.7 /
# torch 1.13); real processes load more kernels as they run; users report 300-700 MB.
CUDA_CONTEXT = 512 * MiB
# No measured figure in our sources for ROCm's context; HIP loads code objects eagerly.
ROCM_CONTEXT = 768 * MiB
# cuBLAS default workspace per handle (8,519,680 B) and the cuBLASLt workspace: 32 MiB
# on sm90+, 4 MiB on sm80 with 24 GB or more, 1 MiB otherwise (PyTorch PR #120925).
CUBLAS = 8_519_680
# NCCL per communicator (NVIDIA/nccl#964, 4xA100 NVLink): 544 MB for 2 ranks, 688 MB more.
NCCL_TWO_RANKS = 544_000_000
NCCL_MORE_RANKS = 688_000_000
# Caching-allocator slack (reserved - allocated): block rounding and fragmentation of
# the memory that changes during the step. 5% is the low end of practitioners'
# margins (Megatron 1.05x, EleutherAI 1.2x); uncalibrated here.
FRAGMENTATION = 0.05


class Overhead(Record, kw_only=True):
    context: float
    workspaces: float
    nccl: float
    allocator: float
    notes: list[str]

    @property
    def total(self) -> float:
        return self.context + self.workspaces + self.nccl + self.allocator


def framework_overhead(
    runtime: str, architecture: str | None, communicators: list[int], dynamic_bytes: float
) -> Overhead:
    """Overhead for ``runtime`` on a GPU of ``architecture`` (e.g. "Hopper (GH100)")."""
    if runtime == "cpu":
        return Overhead(
            context=0,
            workspaces=0,
            nccl=0,
            allocator=0,
            notes=["runtime cpu: no framework overhead is added"],
        )
    arch = (architecture or "").lower()
    lt = (
        32 * MiB
        if any(a in arch for a in ("hopper", "blackwell"))
        else 4 * MiB
        if "ampere" in arch or "ada" in arch
        else 1 * MiB
    )
    context = CUDA_CONTEXT if runtime == "cuda" else ROCM_CONTEXT
    nccl = sum(
        NCCL_TWO_RANKS if ranks == 2 else NCCL_MORE_RANKS for ranks in communicators if ranks > 1
    )
    notes = [
        f"framework overhead: {context / MiB:.0f} MiB {runtime.upper()} context, {(CUBLAS + lt) / MiB:.1f} MiB BLAS workspaces, "
        f"{FRAGMENTATION:.0%} allocator slack on the {dynamic_bytes / MiB:.0f} MiB that change during the step"
        + (f", {len([c for c in communicators if c > 1])} NCCL communicator(s)" if nccl else "")
        + " (published figures, not calibrated on a GPU for this release)"
    ]
    return Overhead(
        context=context,
        workspaces=CUBLAS + lt,
        nccl=nccl,
        allocator=FRAGMENTATION * dynamic_bytes,
        notes=notes,
    )
