"""Cost and energy of GPU-hours.

Cloud: the on-demand price per GPU-hour times GPU-hours. On-premises: the purchase
price spread over the amortization period, charged only to the hours the pool is
busy (idle hours are paid for by the busy ones, so a pool used 50% of the time costs
twice as much per busy hour), plus electricity: board power (TDP × the fraction of it
a running job draws) × PUE (cooling and power delivery) × price per kWh.

Energy is counted at the wall: GPU board power × PUE. CPUs, memory, disks and
network of the hosts are not included; the figure is a lower bound of a job's
energy.
"""

from typing import Literal

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.record import Record

HOURS_PER_YEAR = 8760.0

CostBasis = Literal["cloud", "on_prem"]


class EnergyInputs(Record, kw_only=True):
    electricity_usd_per_kwh: float
    pue: float
    power_fraction_of_tdp: float


class OnPremInputs(Record, kw_only=True):
    amortization_years: float
    utilization: float
    """Share of the owned GPUs' hours that are busy."""


def gpu_power_kw(gpu: GpuSpec, energy: EnergyInputs) -> float:
    """Power at the wall of one running GPU, kW (board power × PUE)."""
    return gpu.tdp_watts * energy.power_fraction_of_tdp * energy.pue / 1000.0


def energy_kwh(gpu: GpuSpec, gpu_hours: float, energy: EnergyInputs) -> float:
    return gpu_power_kw(gpu, energy) * gpu_hours


def on_prem_usd_per_gpu_hour(
    purchase_usd: float, gpu: GpuSpec, energy: EnergyInputs, owned: OnPremInputs
) -> float:
    """Cost of one busy GPU-hour of an owned GPU: amortized purchase + electricity."""
    capital = purchase_usd / (owned.amortization_years * HOURS_PER_YEAR * owned.utilization)
    return capital + gpu_power_kw(gpu, energy) * energy.electricity_usd_per_kwh


def break_even_utilization(
    purchase_usd: float,
    gpu: GpuSpec,
    energy: EnergyInputs,
    amortization_years: float,
    cloud_usd_per_equivalent_hour: float,
) -> float | None:
    """Busy share of the hours above which owning is cheaper than renting the same work.

    Solves ``capital_per_hour / u + electricity_per_hour = cloud cost of the work one
    owned GPU-hour does``. None when electricity alone costs more than the cloud.
    """
    capital = purchase_usd / (amortization_years * HOURS_PER_YEAR)
    margin = (
        cloud_usd_per_equivalent_hour - gpu_power_kw(gpu, energy) * energy.electricity_usd_per_kwh
    )
    if margin <= 0:
        return None
    return capital / margin
