"""The measures a job is read by, beyond its tensors: reserved, device, required.

* ``peak_bytes``: bytes allocated at the peak, ``torch.cuda.max_memory_allocated``: the
  tensors and the cuBLAS workspaces, which come from the same caching allocator.
* ``reserved_bytes``: the caching allocator's segments, ``torch.cuda.max_memory_reserved``:
  the peak and the gap the allocator's segments leave above it (:mod:`reserve`).
* ``device_bytes``: what ``nvidia-smi`` shows for the process: the reserved segments,
  the CUDA (or ROCm) context with the kernels the job loaded, and NCCL's buffers, none
  of which the allocator sees.
* ``required_bytes``: ``device_bytes`` with the planning headroom.

Every figure is data (``data/runtime.toml``) with its source, quote and measure.
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Literal

import msgspec

from gpuplan.core.errors import DataError
from gpuplan.core.record import Record

MiB = 1 << 20
ModuleLoading = Literal["lazy", "eager"]
LAZY_SINCE = (11, 7)
"""CUDA runtime version that introduced lazy module loading (NVIDIA CUDA Programming
Guide, "Lazy Loading": "Lazy loading is available starting in CUDA runtime version 11.7")."""


class ContextFigure(Record):
    runtime: Literal["cuda", "rocm"]
    module_loading: ModuleLoading
    scope: Literal["job", "bare"]
    bytes: int
    architecture: str
    source: str
    quote: str
    measure: str


class Workspace(Record):
    cublas_bytes: int
    hopper_bytes: int
    source: str
    quote: str
    measure: str


class Nccl(Record):
    two_ranks_bytes: int
    more_ranks_bytes: int
    source: str
    quote: str
    measure: str


class RuntimeData(Record):
    context: list[ContextFigure]
    workspace: Workspace
    nccl: Nccl


@cache
def runtime_data() -> RuntimeData:
    raw = resources.files("gpuplan.core.memory.data").joinpath("runtime.toml").read_text()
    try:
        return msgspec.convert(tomllib.loads(raw), RuntimeData)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise DataError(f"core/memory/data/runtime.toml: {exc}") from exc


@cache
def context_figures(runtime: str, loading: ModuleLoading) -> list[ContextFigure]:
    """The job-scope context figures of ``runtime`` under ``loading`` (any loading when
    none is published for it)."""
    rows = [c for c in runtime_data().context if c.runtime == runtime and c.scope == "job"]
    return [c for c in rows if c.module_loading == loading] or rows


def module_loading(cuda_version: str | None, requested: ModuleLoading) -> ModuleLoading:
    """Lazy loading needs a CUDA 11.7+ runtime; before it every kernel loads eagerly."""
    if cuda_version is None:
        return requested
    major, minor = (int(part) for part in cuda_version.split(".")[:2])
    return "eager" if (major, minor) < LAZY_SINCE else requested


class Overhead(Record, kw_only=True):
    """Bytes a process holds beyond its tensors, on one GPU."""

    workspaces: float
    """BLAS workspaces, inside the caching allocator (so in ``peak_bytes``)."""

    context: float
    """CUDA/ROCm context with the job's kernels, outside the allocator."""

    nccl: float
    """NCCL communicator buffers, outside the allocator."""

    notes: list[str]

    @property
    def outside_allocator(self) -> float:
        return self.context + self.nccl


def workspace_bytes(architecture: str | None) -> int:
    """One cuBLAS workspace: 32 MiB on Hopper (sm90), 8,519,680 B elsewhere."""
    w = runtime_data().workspace
    return w.hopper_bytes if "hopper" in (architecture or "").lower() else w.cublas_bytes


def framework_overhead(
    runtime: str,
    architecture: str | None,
    communicators: list[int],
    *,
    handles: int = 2,
    loading: ModuleLoading = "lazy",
) -> Overhead:
    """Overhead for ``runtime`` on a GPU of ``architecture``; see :func:`_overhead`."""
    return _overhead(runtime, architecture, tuple(communicators), handles, loading)


@cache
def _overhead(
    runtime: str,
    architecture: str | None,
    communicators: tuple[int, ...],
    handles: int,
    loading: ModuleLoading,
) -> Overhead:
    """Overhead for ``runtime`` on a GPU of ``architecture`` (e.g. "Hopper (GH100)").

    ``handles``: cuBLAS handles the job uses, one per thread that runs matmuls (a
    training step's backward runs on the autograd engine's thread: 2).
    """
    if runtime == "cpu":
        return Overhead(
            workspaces=0,
            context=0,
            nccl=0,
            notes=["runtime cpu: no framework overhead is added"],
        )
    data = runtime_data()
    figures = context_figures(runtime, loading)
    context = sum(f.bytes for f in figures) // len(figures)
    workspace = workspace_bytes(architecture)
    groups = [c for c in communicators if c > 1]
    nccl = sum(
        data.nccl.two_ranks_bytes if ranks == 2 else data.nccl.more_ranks_bytes for ranks in groups
    )
    notes = [
        f"device_bytes adds the {runtime.upper()} context with the kernels a job loads, "
        f"{context / MiB:.0f} MiB with {figures[0].module_loading} module loading (the mean of "
        f"{len(figures)} published job figure(s), core/memory/data/runtime.toml)"
        + (f", and {len(groups)} NCCL communicator(s), {nccl / 1e6:.0f} MB" if nccl else ""),
        f"peak_bytes includes {handles} cuBLAS workspace(s) of {workspace:,} B, "
        "allocated through the caching allocator",
    ]
    return Overhead(
        workspaces=float(handles * workspace),
        context=float(context),
        nccl=float(nccl),
        notes=notes,
    )


def round_segment(nbytes: float) -> float:
    """A request rounded as the allocator rounds a large one (2 MiB)."""
    step = 2 * MiB
    return -(-nbytes // step) * step
