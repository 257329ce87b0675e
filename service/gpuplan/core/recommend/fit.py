"""Memory of a layout on a GPU, from the estimator, memoized within one request.

The estimator's answer for a layout depends on the GPU only through the measures
around its tensors (the cuBLAS workspace is 32 MiB on Hopper, 8.1 MiB elsewhere;
ROCm's context is larger than CUDA's). So the search runs the estimator once per
layout, without a GPU, and re-prices those terms per GPU with the estimator's own
``measures`` function: the result equals
``estimate(request with gpu=…).required_bytes`` (tests/test_recommend.py checks it).
A bound on estimator calls keeps every request finite.
"""

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.response import measures
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse, ModelSpec, Workload
from gpuplan.core.perf.speed import LayoutLinks
from gpuplan.core.recommend.schema import ParallelLayout

PIPELINE_MICRO_BATCHES = 4
"""Micro-batches per pipeline stage and step the search plans with."""

MAX_ESTIMATES = 160
"""Estimator calls one recommendation may make (each takes 0.1-1 ms); past it, layouts
are treated as unsized and the response carries a warning."""


class MemoryOracle:
    """``required_bytes`` of a workload on a GPU; one estimator run per distinct workload.

    Lives for one request only: the memo is a value of the call, not process state.
    """

    def __init__(self, model: ModelSpec, catalog: Catalog) -> None:
        self._model = model
        self._catalog = catalog
        self._responses: dict[bytes, EstimateResponse | None] = {}
        self._required: dict[tuple[bytes, str, str], int] = {}
        self._laid: dict[
            tuple[int, int, int, int, int, bool], tuple[Workload, Workload, bytes]
        ] = {}
        self.calls = 0
        self.exhausted = False
        self.links: dict[tuple[str, int, int, int], LayoutLinks] = {}
        """Links of a (GPU, layout), for the speed model; kept here as a per-request memo."""

    def laid_out(self, workload: Workload, layout: ParallelLayout) -> tuple[Workload, bytes]:
        """``with_layout(workload, layout)`` and its memo key, built once per request."""
        k = (
            id(workload),
            layout.tensor,
            layout.pipeline,
            layout.data,
            layout.zero_stage,
            layout.cpu_offload_optimizer,
        )
        hit = self._laid.get(k)
        if hit is None:
            laid = with_layout(workload, layout)
            # The entry keeps ``workload`` alive, so its id cannot be reused meanwhile.
            hit = (workload, laid, msgspec.json.encode(laid))
            self._laid[k] = hit
        return hit[1], hit[2]

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

    def required(self, workload: Workload, gpu: GpuSpec, key: bytes | None = None) -> int | None:
        """``required_bytes`` on ``gpu`` (its runtime: ROCm for AMD, CUDA otherwise)."""
        key = key if key is not None else msgspec.json.encode(workload)
        runtime = runtime_of(gpu)
        memo = (key, gpu.architecture, runtime)
        if memo in self._required:
            return self._required[memo]
        base = self.response(workload, key)
        if base is None:
            return None
        p = workload.parallelism
        value = measures(
            base.peak_bytes,
            base.breakdown.allocator_cache_bytes,
            runtime=runtime,
            architecture=gpu.architecture,
            communicators=[p.data, p.tensor, p.pipeline, p.expert],
            training=workload.mode != "inference",
        ).required
        self._required[memo] = value
        return value


def runtime_of(gpu: GpuSpec) -> str:
    return "rocm" if gpu.vendor == "amd" else "cuda"


def with_layout(workload: Workload, layout: ParallelLayout) -> Workload:
    """The workload split as ``layout`` says (the search owns the parallelism)."""
    p = workload.parallelism
    accumulation = workload.gradient_accumulation_steps
    if layout.pipeline > 1 and workload.mode != "inference":
        # A pipeline needs many micro-batches per step to keep its bubble small
        # (Narayanan et al. 2021: m >> p); the search uses at least 4 per stage.
        accumulation = max(accumulation, PIPELINE_MICRO_BATCHES * layout.pipeline)
    return msgspec.structs.replace(
        workload,
        gradient_accumulation_steps=accumulation,
        parallelism=msgspec.structs.replace(
            p,
            tensor=layout.tensor,
            pipeline=layout.pipeline,
            data=layout.data,
            zero_stage=layout.zero_stage,
            cpu_offload=msgspec.structs.replace(
                p.cpu_offload, optimizer=layout.cpu_offload_optimizer
            ),
        ),
    )
