"""Memory of a layout on a GPU, from the estimator, memoized within one request.

The estimator's answer for a layout depends on the GPU only through the measures
around its tensors (the cuBLAS workspace is 32 MiB on Hopper, 8.1 MiB elsewhere;
ROCm's context is larger than CUDA's). So the search runs the estimator once per
layout, without a GPU, and re-prices those terms per GPU with the estimator's own
``measures`` function: the result equals
``estimate(request with gpu=…).required_bytes`` (tests/test_recommend.py checks it).
A bound on estimator calls keeps every request finite.
"""

from collections.abc import Callable

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.overhead import framework_overhead
from gpuplan.core.memory.response import measures
from gpuplan.core.memory.response_records import Measures
from gpuplan.core.memory.schema import (
    EstimateRequest,
    EstimateResponse,
    Fsdp1,
    GradientReduceDtype,
    ModelSpec,
    Workload,
)
from gpuplan.core.memory.states import REDUCE_DTYPE_FRAMEWORKS
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.serve import Stepper
from gpuplan.core.perf.step_records import StepLinks, StepShape
from gpuplan.core.recommend.replica import Profile, ReplicaMemory
from gpuplan.core.recommend.rung import Rung
from gpuplan.core.recommend.schema import Constraints, ParallelLayout

MAX_ESTIMATES = 400
"""Estimator calls one recommendation may make (each takes 0.1-1 ms); past it, layouts
are treated as unsized and the response carries a warning."""


class MemoryOracle:
    """``required_bytes`` of a workload on a GPU; one estimator run per distinct workload.

    Lives for one request only: the memo is a value of the call, not process state.
    """

    def __init__(self, model: ModelSpec, catalog: Catalog, fsdp1: Fsdp1 | None = None) -> None:
        self._model = model
        self._catalog = catalog
        self._fsdp1 = fsdp1
        """The request's FSDP1 settings, for the search's FSDP1 layouts."""
        self._responses: dict[bytes, EstimateResponse | None] = {}
        self._measures: dict[tuple[bytes, str, str], Measures | None] = {}
        self._overheads: dict[
            tuple[str | None, str, tuple[int, ...], bool], tuple[object, ...]
        ] = {}
        self._alike: dict[tuple[bytes, str, tuple[object, ...]], Measures] = {}
        self._laid: dict[tuple[int, bytes, str | None], tuple[Workload, Workload, bytes]] = {}
        self.calls = 0
        self.exhausted = False
        self.ladders: dict[int, list[ParallelLayout]] = {}
        """The search's layouts at a GPU count (they do not depend on the GPU)."""
        self.links: dict[
            tuple[bytes, int],
            tuple[Constraints, dict[int, Link], dict[tuple[int, int, int, int, int], StepLinks]],
        ] = {}
        """The speed model's links by GPU interconnect and constraints (:class:`GpuSearch`)."""
        self.descriptions: dict[tuple[int, str, str], tuple[ParallelLayout, str]] = {}
        """A layout's words by ``id`` of the layout (kept alive in the entry) and the kinds
        of its links (:class:`GpuSearch`)."""
        self.sharded: dict[int, tuple[Workload, tuple[bytes, float, float] | None]] = {}
        """The search's GPU-independent memory bounds of a workload, by ``id`` of the
        workload (kept alive in the entry)."""
        self.rungs: dict[tuple[int, int], tuple[Workload, list[Rung], list[Rung]]] = {}
        """A count's ladder prepared for timing and sizing, and its rungs but DDP's, by
        count and ``id`` of the workload (kept alive in the entry)."""
        self.token_floors: dict[
            tuple[int, tuple[int, ...]], tuple[Workload, list[tuple[Rung, float]]]
        ] = {}
        """Per distinct micro-batch of the rungs at some counts, one of its rungs and the
        least ``count / (micro-batch sequences x sequence x data ranks)`` of those rungs,
        by ``id`` of the workload (kept alive in the entry) and the counts
        (:meth:`GpuSearch.token_floor`)."""
        self.shape_shares: dict[
            tuple[tuple[bytes, int, int, int, int, float, bool], bool], float
        ] = {}
        """What share of the reference table's plateau a micro-batch's GEMMs reach
        (``step.reference_shape_share``: the same on every GPU without a kernel table), by
        the rung's micro-batch key (:attr:`Rung.micro`, which fixes the shapes, the
        parallelism they read and the rows) and fp8."""
        self.traffic: dict[tuple[bytes, int, int, int, int, float, bool], float] = {}
        """A micro-batch's memory-bound bytes (``step.step_traffic_bytes``: the same on
        every GPU, only their time differs), by the rung's micro-batch key."""
        self.shapes: dict[bytes, StepShape] = {}
        """The speed model's view of a laid-out workload (it does not depend on the GPU)."""
        self.replicas: dict[
            tuple[bytes, int, int, int], tuple[object, GpuSpec, ReplicaMemory | None]
        ] = {}
        """A serving replica's memory (``serving.replica_memory``) by the laid-out
        workload's key, ``id`` of the job and of the GPU (both kept alive in the entry)
        and the degree."""
        self.profiles: dict[tuple[bytes, int, str, str], Profile | None] = {}
        """A serving replica's profile step (``serving._profile``) by the laid-out
        workload's key, the step's tokens, and the GPU's architecture and runtime: all
        its estimate reads of the GPU (:meth:`measures`), so the GPUs of one
        architecture share it."""
        self.steppers: dict[tuple[object, ...], tuple[ReplicaMemory, Stepper]] = {}
        """A serving replica's step function (``serving.stepper_for``), by ``id`` of its
        memory (kept alive in the entry) and its GPUs, when the request compares
        disaggregated serving: the serving search, its queues and the comparison's pools
        time the steps of the same replicas."""

    def laid_out(
        self,
        workload: Workload,
        layout: ParallelLayout,
        reduce: GradientReduceDtype | None = None,
    ) -> tuple[Workload, bytes]:
        """``with_layout(workload, layout, reduce)`` and its memo key, built once per
        request."""
        k = (id(workload), msgspec.json.encode(layout), reduce)
        hit = self._laid.get(k)
        if hit is None:
            laid = with_layout(workload, layout, reduce, self._fsdp1)
            # The entry keeps ``workload`` alive, so its id cannot be reused meanwhile.
            hit = (workload, laid, msgspec.json.encode(laid))
            self._laid[k] = hit
        return hit[1], hit[2]

    def estimated(self, key: bytes) -> bool:
        """Whether the workload of ``key`` was estimated (or refused): sizing it on any
        GPU makes no further estimate."""
        return key in self._responses

    def first(self, workload: Workload) -> EstimateResponse:
        """The first estimate of a request; raises the estimator's ``InvalidModel``."""
        result = estimate(EstimateRequest(model=self._model, workload=workload), self._catalog)
        self.calls += 1
        self._responses[msgspec.json.encode(workload)] = result
        return result

    def response(self, workload: Workload, key: bytes | None = None) -> EstimateResponse | None:
        """The GPU-independent estimate; None when the estimator refuses the layout."""
        key = key if key is not None else msgspec.json.encode(workload)
        if key in self._responses:
            return self._responses[key]
        if self.calls >= MAX_ESTIMATES:
            # The bound is reached: further layouts count as not sized (never as fitting),
            # and the response says the search was cut short.
            self.exhausted = True
            return None
        self.calls += 1
        try:
            result: EstimateResponse | None = estimate(
                EstimateRequest(model=self._model, workload=workload), self._catalog
            )
        except InvalidModel:
            result = None
        self._responses[key] = result
        return result

    def measures(
        self, workload: Workload, gpu: GpuSpec, key: bytes | None = None
    ) -> Measures | None:
        """The estimate's measures on ``gpu`` (its runtime: ROCm for AMD, CUDA
        otherwise): what depends on the GPU is re-priced, the rest estimated once."""
        key = key if key is not None else msgspec.json.encode(workload)
        runtime = runtime_of(gpu)
        memo = (key, gpu.architecture, runtime)
        if memo in self._measures:
            return self._measures[memo]
        base = self.response(workload, key)
        if base is None:
            return None
        p = workload.parallelism
        communicators = (p.data, p.tensor, p.pipeline, p.expert)
        training = workload.mode != "inference"
        # ``measures`` reads the architecture only through the framework overhead, so
        # architectures of the same overhead (most share the cuBLAS workspace) share it.
        which = (gpu.architecture, runtime, communicators, training)
        overhead = self._overheads.get(which)
        if overhead is None:
            o = framework_overhead(
                runtime, gpu.architecture, list(communicators), handles=2 if training else 1
            )
            overhead = self._overheads[which] = (o.workspaces, o.context, o.nccl, *o.notes)
        alike = (key, runtime, overhead)
        value = self._alike.get(alike)
        if value is None:
            value = self._alike[alike] = measures(
                base.peak_bytes - base.breakdown.workspace_bytes,  # the tensors alone
                base.breakdown.allocator_cache_bytes,
                workload=workload,
                runtime=runtime,
                architecture=gpu.architecture,
                communicators=list(communicators),
                training=training,
            )
        self._measures[memo] = value
        return value

    def sizer(self, gpu: GpuSpec) -> Callable[[Workload, bytes], int | None]:
        """:meth:`required` on ``gpu`` of a workload and its key, for a search that sizes
        many layouts on one GPU: the memo is looked up without rebuilding its key's GPU
        part on every call."""
        runtime = runtime_of(gpu)
        arch = gpu.architecture
        memo = self._measures

        def required(workload: Workload, key: bytes) -> int | None:
            m = memo.get((key, arch, runtime))
            if m is None:
                m = self.measures(workload, gpu, key)
            return None if m is None else m.required

        return required

    def total(self, workload: Workload, gpu: GpuSpec, key: bytes | None = None) -> int | None:
        """``device_bytes`` on ``gpu`` (what nvidia-smi shows), before the headroom."""
        m = self.measures(workload, gpu, key)
        return None if m is None else m.device

    def required(self, workload: Workload, gpu: GpuSpec, key: bytes | None = None) -> int | None:
        """``required_bytes`` on ``gpu``: the high end of ``device_bytes``'s interval."""
        m = self.measures(workload, gpu, key)
        return None if m is None else m.required


def runtime_of(gpu: GpuSpec) -> str:
    return "rocm" if gpu.vendor == "amd" else "cuda"


def with_layout(
    workload: Workload,
    layout: ParallelLayout,
    reduce: GradientReduceDtype | None = None,
    fsdp1: Fsdp1 | None = None,
) -> Workload:
    """The workload split as ``layout`` says: its parallelism, and for training the
    micro-batch and accumulation the layout re-split the global batch into. ``reduce``:
    the request's ``gradient_reduce_dtype``, for a search's layouts (the workload the
    search starts from carries no framework). ``fsdp1``: the request's FSDP1 settings,
    for an FSDP1 layout (else the workload's own)."""
    p = workload.parallelism
    batch = workload.batch_size
    accumulation = workload.gradient_accumulation_steps
    if workload.mode != "inference":
        batch = layout.micro_batch_size or batch
        accumulation = layout.gradient_accumulation_steps or accumulation
    schedule = p.pipeline_schedule
    if layout.virtual_stages > 1:
        schedule = "interleaved_1f1b"
    # A reduce dtype is Megatron's and FSDP2's choice; a layout under another framework
    # reduces as that framework does.
    reduce = reduce or p.gradient_reduce_dtype
    if layout.framework not in REDUCE_DTYPE_FRAMEWORKS:
        reduce = None
    return msgspec.structs.replace(
        workload,
        batch_size=batch,
        gradient_accumulation_steps=accumulation,
        parallelism=msgspec.structs.replace(
            p,
            tensor=layout.tensor,
            pipeline=layout.pipeline,
            data=layout.data,
            context=layout.context,
            expert=layout.expert,
            virtual_stages=layout.virtual_stages,
            pipeline_schedule=schedule,
            framework=layout.framework,
            gradient_reduce_dtype=reduce,
            # FSDP1's settings mean nothing to another framework's layout.
            fsdp1=(fsdp1 or p.fsdp1) if layout.framework == "fsdp1" else Fsdp1(),
            zero_stage=layout.zero_stage,
            cpu_offload=msgspec.structs.replace(
                p.cpu_offload, optimizer=layout.cpu_offload_optimizer
            ),
        ),
    )
