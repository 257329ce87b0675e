"""What of one GPU model every option of it shares: its rate at the job's precision, its
efficiency class, its price per GPU-hour, and whether a layout may span several of it.
"""

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.cost import on_prem_usd_per_gpu_hour
from gpuplan.core.perf.efficiency import efficiency_class, efficiency_data
from gpuplan.core.perf.speed import Rate, achieved_rate
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.schema import Constraints
from gpuplan.core.record import Record

TP_DEGREES = (2, 4, 8)
"""Tensor-parallel degrees tried beyond 1: powers of two inside a node."""


class GpuContext(Record, kw_only=True):
    """What of a GPU the plans share: its rate, efficiency and price per GPU-hour."""

    gpu: GpuSpec
    rate: Rate | None
    mbu: float
    per_gpu_hour: float | None
    basis: str | None
    reasons: list[str]
    unverified: list[str]


def gpu_context(
    gpu: GpuSpec,
    job: Job,
    request_mfu: float | None,
    request_mbu: float | None,
    constraints: Constraints,
) -> GpuContext:
    cls = efficiency_class(gpu)
    mfu = request_mfu if request_mfu is not None else cls.mfu
    vision = efficiency_data().vision
    if job.vision and request_mfu is None:
        mfu *= vision.mfu_factor
    mbu = request_mbu if request_mbu is not None else cls.mbu
    precision = job.workload.precision
    if job.kind == "inference" and job.workload.weight_quantization in ("int8", "int4", "nf4"):
        # Weight-only quantization dequantizes to 16 bits before the matmul.
        precision = "bf16" if precision in ("fp32", "amp_bf16") else precision
    rate = achieved_rate(gpu, precision, mfu, job.measured.get(gpu.id))
    reasons: list[str] = []
    unverified: list[str] = []
    uses_class = request_mfu is None or (job.kind == "inference" and request_mbu is None)
    if uses_class and not cls.verified:
        unverified.append(
            f"efficiency class {cls.name} (MFU {cls.mfu:.0%}, MBU {cls.mbu:.0%}): {cls.source}"
        )
    if job.vision and request_mfu is None and not vision.verified:
        unverified.append(f"vision MFU factor {vision.mfu_factor}: {vision.source}")
    unverified.extend(f"catalog {field}" for field in gpu.unverified)
    if rate is not None and rate.note:
        reasons.append(rate.note)
    per_hour, basis, price_note = _price(gpu, job, constraints)
    if price_note:
        reasons.append(price_note)
    return GpuContext(
        gpu=gpu,
        rate=rate,
        mbu=mbu,
        per_gpu_hour=per_hour,
        basis=basis,
        reasons=reasons,
        unverified=unverified,
    )


def _price(gpu: GpuSpec, job: Job, c: Constraints) -> tuple[float | None, str | None, str]:
    override = job.prices.get(gpu.id)
    cloud = override.cloud_usd_per_gpu_hour if override else None
    cloud_note = "cloud price from the request"
    if cloud is None and gpu.price.cloud_on_demand is not None:
        p = gpu.price.cloud_on_demand
        cloud = p.usd_per_gpu_hour
        cloud_note = f"cloud ${cloud:.2f}/GPU-h as of {p.as_of} ({p.source})"
    purchase = override.purchase_usd if override else None
    purchase_note = "purchase price from the request"
    if purchase is None and gpu.price.purchase is not None:
        purchase = gpu.price.purchase.usd
        purchase_note = f"purchase ${purchase:,.0f} as of {gpu.price.purchase.as_of}"
    owned = on_prem_usd_per_gpu_hour(purchase, gpu, job.energy, job.owned) if purchase else None
    options: list[tuple[float, str, str]] = []
    if cloud is not None and c.deployment in ("cloud", "hybrid"):
        options.append((cloud, "cloud", cloud_note))
    if owned is not None and c.deployment in ("on_prem", "hybrid"):
        options.append(
            (
                owned,
                "on_prem",
                f"on-prem ${owned:.3f}/GPU-h: {purchase_note} over {job.owned.amortization_years:g} years at "
                f"{job.owned.utilization:.0%} busy, plus electricity",
            )
        )
    if not options:
        need = {
            "cloud": "a cloud price",
            "on_prem": "a purchase price",
            "hybrid": "a cloud or purchase price",
        }[c.deployment]
        return (
            None,
            None,
            f"no {need} for {gpu.id} in the catalog; pass constraints.prices to cost it",
        )
    value, basis, note = min(options)
    return value, basis, note


def multi_gpu_allowed(gpu: GpuSpec, count: int, c: Constraints) -> bool:
    return count == 1 or c.required_interconnect == "any" or gpu.interconnect.gpu_link is not None
