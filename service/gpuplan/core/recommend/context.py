"""What of one GPU model every option of it shares: its rate at the job's precision, its
efficiency class, its price per GPU-hour, and whether a layout may span several of it.
"""

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.comm import group_link
from gpuplan.core.perf.cost import on_prem_usd_per_gpu_hour
from gpuplan.core.perf.efficiency import efficiency_data, generation
from gpuplan.core.perf.kernels import table_for
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.speed import achieved_rate
from gpuplan.core.perf.step_records import Rates
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.pricing import OWNED, basis_words, cloud_price, describe
from gpuplan.core.recommend.schema import Constraints, PriceUsed

TP_DEGREES = (2, 4, 8)
"""Tensor-parallel degrees tried beyond 1: powers of two inside a node."""


def gpu_context(
    gpu: GpuSpec,
    job: Job,
    request_mfu: float | None,
    request_mbu: float | None,
    constraints: Constraints,
) -> GpuContext:
    gen = generation(gpu)
    data = efficiency_data()
    precision = job.workload.precision
    if job.kind == "inference" and job.workload.weight_quantization in ("int8", "int4", "nf4"):
        # Weight-only quantization dequantizes to 16 bits before the matmul.
        precision = "bf16" if precision in ("fp32", "amp_bf16") else precision
    rate = achieved_rate(gpu, precision, job.measured.get(gpu.id))
    rates = None
    if rate is not None:
        rates = Rates(
            peak_flops=rate.peak_flops,
            attention_peak_flops=rate.attention_peak_flops,
            bandwidth_bytes_per_s=float(gpu.memory_bandwidth_bytes_per_s),
            fp8=rate.precision == "fp8",
            generation=gen,
            kernels=data.kernels,
            vision_factor=data.vision.mfu_factor if job.vision else 1.0,
            mfu=request_mfu,
            kernel_table=_kernel_table(gpu, job, rate.precision),
            measured_peak=rate.source == "measured",
        )
    mbu = request_mbu if request_mbu is not None else gen.decode_bandwidth_efficiency
    reasons: list[str] = []
    unverified: list[str] = []
    if (request_mfu is None or (job.kind == "inference" and request_mbu is None)) and not (
        gen.verified
    ):
        unverified.append(f"efficiencies of GPU generation {gen.name}: {gen.source}")
    if job.vision and request_mfu is None and not data.vision.verified:
        unverified.append(f"vision GEMM factor {data.vision.mfu_factor}: {data.vision.source}")
    unverified.extend(f"catalog {field}" for field in gpu.unverified)
    if rate is not None and rate.note:
        reasons.append(rate.note)
    price, basis, price_note = _price(gpu, job, constraints)
    if price_note:
        reasons.append(price_note)
    return GpuContext(
        gpu=gpu,
        rate=rate,
        rates=rates,
        mbu=mbu,
        mbu_given=request_mbu is not None,
        per_gpu_hour=price.usd_per_gpu_hour if price else None,
        basis=basis,
        price=price,
        reasons=reasons,
        unverified=unverified,
    )


def _kernel_table(gpu: GpuSpec, job: Job, precision: str) -> str | None:
    """The measured kernel table that times this GPU's GEMMs and attention: where one
    covers it, for the 16-bit and fp8 paths it measured, and not when the fleet's own
    measurement of the GPU sets its rate (that measurement is then what the job runs at)."""
    if precision not in ("bf16", "fp16", "fp8") or gpu.id in job.measured:
        return None
    if job.kind == "inference" and job.workload.weight_quantization not in (None, "none"):
        return None  # weight-only quantized GEMMs read fewer bytes than the 16-bit ones measured
    return gpu.id if table_for(gpu.id) is not None else None


def _price(gpu: GpuSpec, job: Job, c: Constraints) -> tuple[PriceUsed | None, str | None, str]:
    """The price per GPU-hour for the deployment, its basis (``cloud``/``on_prem``) and
    the reason line that says where it comes from."""
    cloud = cloud_price(gpu, job)
    override = job.prices.get(gpu.id)
    purchase = override.purchase_usd if override else None
    purchase_note = "purchase price from the request"
    as_of, source = None, "constraints.prices of the request"
    if purchase is None and gpu.price.purchase is not None:
        purchase = gpu.price.purchase.usd
        as_of, source = gpu.price.purchase.as_of, gpu.price.purchase.source
        purchase_note = f"purchase ${purchase:,.0f} as of {as_of}"
    owned = on_prem_usd_per_gpu_hour(purchase, gpu, job.energy, job.owned) if purchase else None
    options: list[tuple[float, str, PriceUsed, str]] = []
    if cloud is not None and c.deployment in ("cloud", "hybrid"):
        options.append((cloud.usd_per_gpu_hour, "cloud", cloud, describe(cloud)))
    if owned is not None and c.deployment in ("on_prem", "hybrid"):
        years = job.owned.amortization_years
        options.append(
            (
                owned,
                "on_prem",
                PriceUsed(usd_per_gpu_hour=owned, provider=OWNED, as_of=as_of, source=source),
                f"on-prem ${owned:.3f}/GPU-h: {purchase_note} over {years:g} years at "
                f"{job.owned.utilization:.0%} busy, plus electricity",
            )
        )
    if not options:
        cloud_need = f"cloud price on the basis ({basis_words(job)})"
        need, fix = {
            "cloud": (cloud_need, "constraints.prices, or pricing.providers that list it"),
            "on_prem": ("purchase price", "constraints.prices (purchase_usd)"),
            "hybrid": (f"{cloud_need} or purchase price", "constraints.prices"),
        }[c.deployment]
        return None, None, f"no {need} for {gpu.id}; pass {fix}"
    _, basis, price, note = min(options, key=lambda o: (o[0], o[1]))
    return price, basis, note


def multi_gpu_allowed(gpu: GpuSpec, count: int, c: Constraints) -> bool:
    return count == 1 or c.required_interconnect == "any" or gpu.interconnect.gpu_link is not None


def link_over(gpu: GpuSpec, size: int, c: Constraints) -> Link:
    """The slowest link a group of ``size`` of these GPUs talks over, with the request's
    GPUs per node and network."""
    return group_link(
        gpu, size, gpus_per_node=c.gpus_per_node, network_bytes_per_s=c.network_bytes_per_s_per_gpu
    )
