"""The plan file and ``POST /v1/plan``: a recommendation request plus assertions.

A plan file is what a CI pipeline keeps next to its training code: the job (model,
workload, runtime), the work volume, objective and constraints, exactly as
``POST /v1/recommendations`` takes them (the Struct is inherited, so the two can never
drift), and ``targets``: the assertions that make the pipeline pass or fail. The
published JSON Schema (``api/plan.schema.json``) is generated from these Structs.
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.memory.schema import EstimateResponse
from gpuplan.core.recommend.schema import (
    Advice,
    Candidate,
    GpuName,
    HybridComparison,
    PriceBasis,
    RecommendRequest,
    Scenario,
)
from gpuplan.core.record import Record

TargetName = Literal[
    "fits", "max_cost_usd", "max_time_hours", "mig_profile_at_most", "min_memory_headroom"
]
Status = Literal["pass", "fail"]


class FitsTarget(Record, kw_only=True):
    """The job must fit ``count`` GPUs of this model."""

    gpu: GpuName
    """Any catalog lookup form: id, alias, NVML name (``NVIDIA L4``), GFD label, PCI id."""

    count: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1


class MigTarget(Record, kw_only=True):
    """The job must fit a MIG instance of this profile (or a smaller one) on this GPU."""

    gpu: GpuName
    profile: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    """nvidia-smi (``3g.40gb``), mig-parted or Kubernetes (``nvidia.com/mig-3g.40gb``) form."""


CheckAt = Literal["estimate", "pessimistic"]


class Targets(Record, kw_only=True):
    """Assertions about the job; each one present gets a verdict (docs/ci.md)."""

    fits: FitsTarget | None = None
    """Per-GPU ``required_bytes`` (20% headroom included) ≤ usable memory on ``count`` GPUs."""

    max_cost_usd: Annotated[float, msgspec.Meta(gt=0, le=1e12)] | None = None
    """Cost of the best plan on at most ``fits.count`` of the ``fits`` GPU (else of the top
    recommendation)."""

    max_time_hours: Annotated[float, msgspec.Meta(gt=0, le=1e7)] | None = None
    """Time of the same plan (training: wall clock; inference: the period planned for)."""

    mig_profile_at_most: MigTarget | None = None
    """The smallest MIG profile that holds the job is at most this one."""

    min_memory_headroom: Annotated[float, msgspec.Meta(ge=0, lt=1)] | None = None
    """1 − required/usable on the ``fits`` GPU (else the top recommendation's) ≥ this."""

    check_at: CheckAt = "estimate"
    """What ``max_cost_usd`` and ``max_time_hours`` are checked against: the ``estimate``
    (the central prediction), or its ``pessimistic`` end, the high end of the plan's 80%
    interval (``intervals`` of the candidate): the target then passes only when 9 jobs in
    10 like it would come in under it."""


class CiPlan(RecommendRequest, kw_only=True):
    """A plan file: the recommendation's request and the targets to check."""

    targets: Targets
    limit: Annotated[int, msgspec.Meta(ge=1, le=500)] = 5
    """Most recommendations returned (a plan shows the top few)."""


# ---------------------------------------------------------------- response


Unit = Literal["bytes", "usd", "hours", "fraction"]


class Verdict(Record, kw_only=True):
    """One target, checked."""

    target: TargetName
    status: Status
    reason: str
    """A sentence with the numbers compared."""

    actual: int | float | None
    """What the job needs or costs (bytes, USD, hours, a headroom fraction); None when unknown."""

    limit: int | float | None
    """What the target allows."""

    unit: Unit
    gpu: str | None = None
    """Catalog id of the GPU the numbers are for."""

    count: int | None = None
    layout: str | None = None
    """The layout sized at ``count`` GPUs (e.g. ``t1p1d4z3`` = ZeRO-3 over 4 ranks)."""

    profile: str | None = None
    """``mig_profile_at_most``: the smallest profile that holds the job."""


class MigFit(Record, kw_only=True):
    """The smallest MIG instance of one MIG-capable GPU that holds the job unsharded."""

    gpu: str
    """Catalog id."""

    name: str
    required_bytes: int
    """The job's ``required_bytes`` on one GPU of this model (its overheads, 20% headroom)."""

    profile: str | None
    """Smallest profile whose *usable* memory holds ``required_bytes``; None: none does."""

    resource: str | None
    """Kubernetes resource under the ``mixed`` strategy, e.g. ``nvidia.com/mig-3g.40gb``."""

    memory_bytes: int | None
    """Usable memory of that profile as the driver reports it."""

    compute_slices: int | None
    utilization: float | None
    """required / usable of the profile."""

    unverified: bool = False
    """The profile's numbers are not all confirmed on hardware."""


class CiReport(Record, kw_only=True):
    """A plan file, checked: a verdict per target, and the memory estimate,
    recommendations and MIG fits behind them (``POST /v1/plan``, ``gpuplan plan``)."""

    plan_id: str
    """``sha256:`` of the normalized request (defaults filled, keys sorted): equal plans, equal ids."""

    passed: bool
    """Every target passed."""

    verdicts: list[Verdict]
    """One per target present."""

    estimate: EstimateResponse
    """The job on one GPU, as its workload describes it (parallelism included)."""

    recommendations: list[Candidate]
    price_basis: PriceBasis
    """Whose prices the costs (and the ``max_cost_usd`` verdict) use."""

    scenario: Scenario
    mig: list[MigFit]
    advice: list[Advice]
    advice_gpu: str | None
    """Catalog id of the GPU the advice is for: ``constraints.preferred_gpu``, else
    ``targets.fits.gpu``, else the top recommendation's GPU."""

    hybrid: HybridComparison | None
    """Owned pool + cloud burst comparison, with ``constraints.deployment: hybrid`` or ``hybrid``."""

    assumptions: list[str]
    unverified: list[str]
    warnings: list[str]
