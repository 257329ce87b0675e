"""The seed guide's scenario matrix: which class of hardware a workload belongs to.

The class is chosen by the workload's one-GPU, unsharded ``required_bytes`` (with the
estimator's headroom, the high end of its interval). The bands and their hardware classes are data
(data/scenarios.toml); sizes in the guide's gaps join the lower band (the rule is
stated there and in docs/recommendation.md). The guide's own cost-effectiveness
ratings are not in our references, so the rating given is computed from the catalog:
dense 16-bit TFLOP/s per cloud USD per hour of the class's reference cards, on the
request's price basis, dated by the prices' ``as_of``.
"""

import tomllib
from collections.abc import Callable
from functools import cache
from importlib import resources
from typing import Literal

import msgspec

from gpuplan.core.catalog import DEFAULT_PROVIDERS, Catalog, GpuSpec, UnknownGpu, lowest
from gpuplan.core.recommend.schema import PriceUsed, Scenario
from gpuplan.core.record import Record

GiB = 1 << 30

ScenarioClass = Literal[
    "light_inference", "medium_training", "large_distributed_training", "supercomputing_research"
]


class Band(Record, kw_only=True):
    class_: ScenarioClass = msgspec.field(name="class")
    guide_band: str
    upper_gib: float | None = None
    hardware_class: list[str]


class Matrix(Record, kw_only=True):
    source: str
    band: list[Band]


@cache
def matrix() -> Matrix:
    text = (
        resources.files("gpuplan.core.recommend.data").joinpath("scenarios.toml").read_text("utf-8")
    )
    data = msgspec.convert(tomllib.loads(text), Matrix)
    edges = [b.upper_gib for b in data.band]
    closed = [e for e in edges[:-1] if e is not None]
    if edges[-1] is not None or len(closed) != len(edges) - 1 or closed != sorted(closed):
        raise ValueError("scenarios.toml: bands must rise, and only the last is open-ended")
    return data


RULE = (
    "bands by one-GPU unsharded required_bytes in GiB; a size between two of the guide's "
    "bands joins the lower band, whose hardware class holds it: < 8 GiB light_inference, "
    "< 32 GiB medium_training, <= 80 GiB large_distributed_training, above supercomputing_research"
)


PriceOf = Callable[[GpuSpec], PriceUsed | None]


def _default_price(gpu: GpuSpec) -> PriceUsed | None:
    quote = lowest(gpu, DEFAULT_PROVIDERS, "on_demand")
    if quote is None:
        return None
    return PriceUsed(
        usd_per_gpu_hour=quote.usd_per_gpu_hour,
        provider=quote.provider,
        kind=quote.kind,
        as_of=quote.as_of,
    )


def classify(required_bytes: int, catalog: Catalog, price_of: PriceOf = _default_price) -> Scenario:
    """The band of ``required_bytes``; its rating uses ``price_of`` (the request's price
    basis; default: AWS on-demand)."""
    m = matrix()
    chosen = m.band[-1]
    for band in m.band:
        if band.upper_gib is not None and (
            required_bytes < band.upper_gib * GiB
            or (band is m.band[-2] and required_bytes <= band.upper_gib * GiB)
        ):
            chosen = band
            break
    return Scenario(
        class_=chosen.class_,
        required_bytes=required_bytes,
        band=chosen.guide_band,
        hardware_class=chosen.hardware_class,
        cost_effectiveness=_rating(chosen.hardware_class, catalog, price_of),
        rule=RULE,
    )


def _rating(ids: list[str], catalog: Catalog, price_of: PriceOf) -> str:
    parts = []
    for gpu_id in ids:
        try:
            gpu = catalog.get(gpu_id)
        except UnknownGpu:
            continue
        peak = gpu.peak_flops.get("bf16") or gpu.peak_flops.get("fp16")
        price = price_of(gpu)
        if peak is None or price is None:
            parts.append(f"{gpu.id}: no cloud price on the basis")
            continue
        kind = f" {price.kind}" if price.kind else ""
        dated = f" as of {price.as_of}" if price.as_of else ""
        parts.append(
            f"{gpu.id}: {peak / 1e12 / price.usd_per_gpu_hour:.0f} dense 16-bit TFLOP/s per USD/h "
            f"(${price.usd_per_gpu_hour:.2f}/h, {price.provider}{kind}{dated})"
        )
    return (
        "computed from the catalog (the guide's own rating is not in our references): "
        + "; ".join(parts)
    )
