"""AMD telemetry through amd-smi (the ``amdsmi`` package that ships with ROCm).

A thinner backend than NVML: utilization, memory, power, temperature and clocks,
with the same guarded-field rule. amd-smi's units have moved between releases
(VRAM in MB; power in W or µW), so they are normalised here and only here.
Its values are unverified on hardware in this project: see docs/agent.md.
"""

from typing import Any

from gpuplan.agent.telemetry.base import GuardedSource, Sweep, TelemetryError, Vendor
from gpuplan.core.fleet import GpuTelemetry

MB = 1024 * 1024  # amd-smi's "MB" for VRAM is MiB (it divides bytes by 1024²)
MHZ = 1_000_000


class AmdSource(GuardedSource):
    """Reads every AMD GPU amd-smi reports."""

    vendor: Vendor = "amd"
    LIBRARY = "amd-smi"
    INIT = "amdsmi_init"
    SHUTDOWN = "amdsmi_shut_down"

    def __init__(self, amdsmi: Any) -> None:
        self.amdsmi = amdsmi
        super().__init__(amdsmi, amdsmi.AmdSmiException, amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)

    def collect(self, node: str) -> Sweep:
        smi = self.amdsmi
        try:
            handles = smi.amdsmi_get_processor_handles()
        except smi.AmdSmiException as err:
            self.errors["library"] += 1
            raise TelemetryError(f"amd-smi could not list devices: {err}") from err
        gpus: list[GpuTelemetry] = []
        driver: str | None = None
        for index, h in enumerate(handles):
            missing: list[str] = []
            try:
                uuid = str(smi.amdsmi_get_gpu_device_uuid(h))
                asic = smi.amdsmi_get_gpu_asic_info(h)
            except smi.AmdSmiException:
                self.errors["gpu_lost"] += 1
                gpus.append(
                    GpuTelemetry(
                        index=index, uuid=f"unknown-{index}", model_name="unknown", up=False
                    )
                )
                continue
            key = uuid
            info = self._get(key, "driver_version", [], "amdsmi_get_gpu_driver_info", h)
            if info and driver is None:
                driver = str(info.get("driver_version")) or None
            activity = self._get(key, "utilization_ratio", missing, "amdsmi_get_gpu_activity", h)
            vram = self._get(key, "memory_total_bytes", missing, "amdsmi_get_gpu_vram_usage", h)
            power = self._get(key, "power_watts", missing, "amdsmi_get_power_info", h)
            temp = self._get(
                key,
                "temperature_celsius",
                missing,
                "amdsmi_get_temp_metric",
                h,
                smi.AmdSmiTemperatureType.EDGE,
                smi.AmdSmiTemperatureMetric.CURRENT,
            )
            clock = self._get(
                key, "sm_clock_hertz", missing, "amdsmi_get_clock_info", h, smi.AmdSmiClkType.GFX
            )
            total = used = None
            if vram is not None:
                total, used = int(vram["vram_total"]) * MB, int(vram["vram_used"]) * MB
            gpus.append(
                GpuTelemetry(
                    index=index,
                    uuid=uuid,
                    model_name=str(asic.get("market_name") or "unknown"),
                    utilization_ratio=_ratio(activity, "gfx_activity"),
                    memory_utilization_ratio=_ratio(activity, "umc_activity"),
                    memory_total_bytes=total,
                    memory_used_bytes=used,
                    memory_free_bytes=None if total is None or used is None else total - used,
                    power_watts=_watts(power),
                    temperature_celsius=None if temp is None else float(temp),
                    sm_clock_hertz=None if clock is None else float(clock["clk"]) * MHZ,
                    unsupported_fields=sorted(set(missing)),
                )
            )
        return Sweep(vendor="amd", driver_version=driver, gpus=gpus)


def _ratio(activity: Any, key: str) -> float | None:
    value = None if activity is None else activity.get(key)
    return None if not isinstance(value, int | float) else value / 100


def _watts(power: Any) -> float | None:
    """Socket power in W; releases before ROCm 6.1 named it ``average_socket_power``."""
    if power is None:
        return None
    for key in ("current_socket_power", "average_socket_power"):
        value = power.get(key)
        if isinstance(value, int | float):
            return float(value)
    return None
