"""What of one GPU model every option of it shares.

Kept apart from :mod:`gpuplan.core.recommend.context`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.speed import Rate
from gpuplan.core.perf.step_records import Rates
from gpuplan.core.recommend.schema import PriceUsed
from gpuplan.core.record import Record


class GpuContext(Record, kw_only=True):
    """What of a GPU the plans share: its rates, efficiencies and price per GPU-hour."""

    gpu: GpuSpec
    rate: Rate | None
    """The matmul peak for the job's precision; None: the GPU cannot run it."""

    rates: Rates | None
    """What the speed model times this GPU's kernels with."""

    mbu: float
    """Share of the memory bandwidth a decode step reaches."""

    mbu_given: bool = False
    """``mbu`` is the request's ``efficiency.mbu``, not the generation's."""

    per_gpu_hour: float | None
    basis: str | None
    price: PriceUsed | None
    """The price behind ``per_gpu_hour``: provider, kind, date, source."""

    reasons: list[str]
    unverified: list[str]
