"""NVIDIA telemetry through NVML (``nvidia-ml-py``), one guarded call per field.

Every query is wrapped on its own (the pattern of nvidia_gpu_exporter's guarded
device): ``NotSupported``, ``FunctionNotFound`` (an older driver lacks the symbol)
and ``NoPermission`` mark that field of that GPU unsupported, are counted once and
never retried; ``GpuIsLost`` marks the GPU down and stops querying it; any other
error is counted and the field skipped for this sweep. One bad field never costs
the sweep. ``nvml`` is the ``pynvml`` module, or a
:class:`~gpuplan.agent.telemetry.recording.ReplayNvml` in tests.
"""

import re
import time
from collections.abc import Callable
from typing import Any

from gpuplan.agent.telemetry.base import GuardedSource, Sweep, TelemetryError, Vendor
from gpuplan.agent.telemetry.gpm import SETTLE_SECONDS, GpmSampler, read_activity
from gpuplan.agent.telemetry.nvml_errors import Lost, error_kind
from gpuplan.core.fleet import GpuTelemetry, MigInstance

MHZ = 1_000_000
KIB = 1024
# "MIG 3g.40gb" (profile info) or "NVIDIA H100 80GB HBM3 MIG 3g.40gb" (device name).
# nvmlNvlinkVersion_t (nvml.h) to the NVLink generation: 6 is NVLink 4.0 (Hopper).
_NVLINK_MAJOR = {1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 5, 8: 6}
_PROFILE = re.compile(r"(\d+g\.\d+gb(?:\+\w+)?)")


class NvmlSource(GuardedSource):
    """Reads every GPU and MIG instance NVML reports."""

    vendor: Vendor = "nvidia"
    LIBRARY = "NVML"
    INIT = "nvmlInit"
    SHUTDOWN = "nvmlShutdown"

    def __init__(
        self,
        nvml: Any,
        gpm_settle_seconds: float = SETTLE_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.nvml = nvml
        self._lost: dict[int, tuple[str, str]] = {}  # index -> (uuid, model name)
        self._identity: dict[int, tuple[str, str]] = {}
        self._skip_codes = {
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            nvml.NVML_ERROR_NO_PERMISSION,
        }
        super().__init__(nvml, nvml.NVMLError)
        self._gpm = GpmSampler(nvml, self.errors, gpm_settle_seconds, sleep)

    def close(self) -> None:
        self._gpm.close()
        super().close()

    def _is_unsupported(self, err: Exception) -> bool:
        """Not supported, no such function, no permission; a lost GPU stops its sweep."""
        code = getattr(err, "value", None)
        if code == self.nvml.NVML_ERROR_GPU_IS_LOST:
            self.errors["gpu_lost"] += 1
            raise Lost from err
        if code in self._skip_codes:
            return True
        self.errors[error_kind(err)] += 1
        return False

    # -- the sweep -------------------------------------------------------------

    def collect(self, node: str) -> Sweep:
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as err:
            self.errors[error_kind(err)] += 1
            raise TelemetryError(f"NVML could not count devices: {err}") from err
        driver: str | None = self._get("system", "driver_version", [], "nvmlSystemGetDriverVersion")
        gpus: list[GpuTelemetry] = []
        migs: list[MigInstance] = []
        handles: dict[int, Any] = {}
        for index in range(count):
            if index in self._lost:
                uuid, name = self._lost[index]
                gpus.append(GpuTelemetry(index=index, uuid=uuid, model_name=name, up=False))
                continue
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                gpu, gpu_migs = self._device(node, index, handle)
            except (Lost, nvml.NVMLError) as err:
                if isinstance(err, nvml.NVMLError):
                    self.errors[error_kind(err)] += 1
                uuid, name = self._identity.get(index, (f"unknown-{index}", "unknown"))
                if isinstance(err, Lost) or err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    self._lost[index] = (uuid, name)
                gpus.append(GpuTelemetry(index=index, uuid=uuid, model_name=name, up=False))
                continue
            handles[index] = handle
            gpus.append(gpu)
            migs.extend(gpu_migs)
        gpus, migs = self._activity(gpus, migs, handles)
        return Sweep(
            vendor="nvidia",
            driver_version=_text(driver) if driver is not None else None,
            gpus=gpus,
            mig_instances=migs,
            nvlink_pairs=self._nvlink_pairs(handles),
        )

    def _device(self, node: str, index: int, h: Any) -> tuple[GpuTelemetry, list[MigInstance]]:
        nvml = self.nvml
        uuid = _text(nvml.nvmlDeviceGetUUID(h))
        name = _text(nvml.nvmlDeviceGetName(h))
        self._identity[index] = (uuid, name)
        missing: list[str] = []

        def get(field: str, fn: str, *args: Any) -> Any:
            return self._get(uuid, field, missing, fn, *args)

        pci = get("pci_bus_id", "nvmlDeviceGetPciInfo_v3", h)
        util = get("utilization_ratio", "nvmlDeviceGetUtilizationRates", h)
        memory = get("memory_total_bytes", "nvmlDeviceGetMemoryInfo", h)
        power = get("power_watts", "nvmlDeviceGetPowerUsage", h)
        limit = get("power_limit_watts", "nvmlDeviceGetEnforcedPowerLimit", h)
        energy = get("energy_joules", "nvmlDeviceGetTotalEnergyConsumption", h)
        temperature = self._temperature(uuid, missing, h)
        sm = get("sm_clock_hertz", "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_SM)
        mem_clock = get("memory_clock_hertz", "nvmlDeviceGetClockInfo", h, nvml.NVML_CLOCK_MEM)
        sm_max = get("sm_clock_max_hertz", "nvmlDeviceGetMaxClockInfo", h, nvml.NVML_CLOCK_SM)
        gen = get("pcie_generation", "nvmlDeviceGetCurrPcieLinkGeneration", h)
        width = get("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", h)
        max_gen = get("pcie_max_generation", "nvmlDeviceGetMaxPcieLinkGeneration", h)
        max_width = get("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth", h)
        tx = get(
            "pcie_tx_bytes_per_second",
            "nvmlDeviceGetPcieThroughput",
            h,
            nvml.NVML_PCIE_UTIL_TX_BYTES,
        )
        rx = get(
            "pcie_rx_bytes_per_second",
            "nvmlDeviceGetPcieThroughput",
            h,
            nvml.NVML_PCIE_UTIL_RX_BYTES,
        )
        links, version = self._nvlink(uuid, missing, h)
        nvlink_tx = nvlink_rx = None
        if links:
            nvlink_tx, nvlink_rx = self._nvlink_bytes(uuid, missing, h)
        mig_mode = get("mig_enabled", "nvmlDeviceGetMigMode", h)
        mig_enabled = None if mig_mode is None else mig_mode[0] == nvml.NVML_DEVICE_MIG_ENABLE
        processes = get("compute_processes", "nvmlDeviceGetComputeRunningProcesses", h)
        gpu = GpuTelemetry(
            index=index,
            uuid=uuid,
            model_name=name,
            pci_bus_id=None if pci is None else _text(pci.busId),
            utilization_ratio=None if util is None else util.gpu / 100,
            memory_utilization_ratio=None if util is None else util.memory / 100,
            memory_total_bytes=None if memory is None else int(memory.total),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_free_bytes=None if memory is None else int(memory.free),
            power_watts=_milli(power),
            power_limit_watts=_milli(limit),
            energy_joules=_milli(energy),
            temperature_celsius=temperature,
            sm_clock_hertz=_scaled(sm, MHZ),
            memory_clock_hertz=_scaled(mem_clock, MHZ),
            sm_clock_max_hertz=_scaled(sm_max, MHZ),
            pcie_generation=gen,
            pcie_width=width,
            pcie_max_generation=max_gen,
            pcie_max_width=max_width,
            pcie_tx_bytes_per_second=_scaled(tx, KIB),
            pcie_rx_bytes_per_second=_scaled(rx, KIB),
            nvlink_links_active=links,
            nvlink_version=version,
            nvlink_tx_bytes=nvlink_tx,
            nvlink_rx_bytes=nvlink_rx,
            mig_enabled=mig_enabled,
            compute_processes=None if processes is None else len(processes),
            unsupported_fields=sorted(set(missing)),
        )
        migs: list[MigInstance] = []
        if mig_enabled:
            migs = self._mig_instances(node, gpu, h, processes or [], missing)
            gpu.unsupported_fields = sorted(set(missing))
        return gpu, migs

    def _temperature(self, uuid: str, missing: list[str], h: Any) -> float | None:
        """``nvmlDeviceGetTemperatureV``, falling back to the deprecated call on old drivers."""
        nvml = self.nvml
        probe: list[str] = []
        value = self._get(
            uuid, "temperature_v", probe, "nvmlDeviceGetTemperatureV", h, nvml.NVML_TEMPERATURE_GPU
        )
        if value is None:
            value = self._get(
                uuid,
                "temperature_celsius",
                missing,
                "nvmlDeviceGetTemperature",
                h,
                nvml.NVML_TEMPERATURE_GPU,
            )
        return None if value is None else float(value)

    def _nvlink(self, uuid: str, missing: list[str], h: Any) -> tuple[int | None, int | None]:
        """Active NVLink links and the version of the first active one."""
        nvml = self.nvml
        if (uuid, "nvlink_links_active") in self._unsupported:
            missing += ["nvlink_links_active", "nvlink_version"]
            return None, None
        active = 0
        version: int | None = None
        for link in range(nvml.NVML_NVLINK_MAX_LINKS):
            try:
                state = nvml.nvmlDeviceGetNvLinkState(h, link)
            except nvml.NVMLError as err:
                if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    self.errors["gpu_lost"] += 1
                    raise Lost from err
                if link == 0:  # no NVLink on this GPU (PCIe card) or no permission
                    self._unsupported.add((uuid, "nvlink_links_active"))
                    self.errors["not_supported"] += 1
                    missing += ["nvlink_links_active", "nvlink_version"]
                    return None, None
                break  # past the last link this GPU has
            if state == nvml.NVML_NVLINK_STATE_ACTIVE:
                active += 1
                if version is None:
                    code = self._get(
                        uuid, "nvlink_version", missing, "nvmlDeviceGetNvLinkVersion", h, link
                    )
                    version = None if code is None else _NVLINK_MAJOR.get(int(code))
        return active, version

    def _nvlink_bytes(self, uuid: str, missing: list[str], h: Any) -> tuple[int | None, int | None]:
        """Cumulative NVLink payload bytes (KiB counters; scope 0, GPU-wide: see docs)."""
        nvml = self.nvml
        fields = [
            nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ]
        names = ("nvlink_tx_bytes", "nvlink_rx_bytes")
        if all((uuid, name) in self._unsupported for name in names):
            missing += names
            return None, None
        values = self._get(uuid, "nvlink_bytes", missing, "nvmlDeviceGetFieldValues", h, fields)
        if values is None:
            return None, None
        out: list[int | None] = [None, None]
        for slot, (name, value) in enumerate(zip(names, values, strict=False)):
            if value.nvmlReturn != nvml.NVML_SUCCESS:
                self._unsupported.add((uuid, name))
                self.errors["not_supported"] += 1
                missing.append(name)
            else:
                out[slot] = int(value.value.ullVal) * KIB
        return out[0], out[1]

    def _mig_instances(
        self, node: str, gpu: GpuTelemetry, h: Any, processes: list[Any], missing: list[str]
    ) -> list[MigInstance]:
        nvml = self.nvml
        key = gpu.uuid

        def get(field: str, fn: str, *args: Any) -> Any:
            return self._get(key, field, missing, fn, *args)

        slots = get("mig_devices", "nvmlDeviceGetMaxMigDeviceCount", h) or 0
        busy_instances = {getattr(p, "gpuInstanceId", None) for p in processes}
        out: list[MigInstance] = []
        for slot in range(slots):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
            except nvml.NVMLError as err:
                if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    raise Lost from err
                if err.value != nvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: an empty slot
                    self.errors[error_kind(err)] += 1
                continue
            try:
                mig_uuid = _text(nvml.nvmlDeviceGetUUID(mig))
                gi_id = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
                memory = nvml.nvmlDeviceGetMemoryInfo(mig)
            except nvml.NVMLError as err:
                if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                    raise Lost from err
                self.errors[error_kind(err)] += 1
                continue
            ci_id = get("mig_compute_instance_id", "nvmlDeviceGetComputeInstanceId", mig)
            start = size = None
            profile: str | None = None
            gi = get("mig_placement", "nvmlDeviceGetGpuInstanceById", h, gi_id)
            info = None if gi is None else get("mig_placement", "nvmlGpuInstanceGetInfo", gi)
            if info is not None:
                start, size = int(info.placement.start), int(info.placement.size)
                prof = get(
                    "mig_profile", "nvmlDeviceGetGpuInstanceProfileInfoById", h, int(info.profileId)
                )
                profile = None if prof is None else _profile(_text(prof.name))
            if profile is None:  # the MIG device's name ends in its profile
                name = get("mig_name", "nvmlDeviceGetName", mig)
                profile = None if name is None else _profile(_text(name))
            own = get("mig_processes", "nvmlDeviceGetComputeRunningProcesses", mig)
            in_use = bool(own) if own is not None else gi_id in busy_instances
            out.append(
                MigInstance(
                    node=node,
                    gpu_index=gpu.index,
                    gpu_uuid=gpu.uuid,
                    gpu_model_name=gpu.model_name,
                    mig_uuid=mig_uuid,
                    profile=profile or "unknown",
                    gpu_instance_id=gi_id,
                    compute_instance_id=None if ci_id is None else int(ci_id),
                    placement_start=start,
                    placement_size=size,
                    memory_bytes=int(memory.total),
                    memory_used_bytes=int(memory.used),
                    in_use=in_use,
                )
            )
        return out

    def _activity(
        self, gpus: list[GpuTelemetry], migs: list[MigInstance], handles: dict[int, Any]
    ) -> tuple[list[GpuTelemetry], list[MigInstance]]:
        """GPM activity of each GPU and GPU instance; a GPU lost while it was sampled is
        reported down, without its MIG instances, from this sweep on."""
        lost = read_activity(self._gpm, gpus, migs, handles)
        if not lost:
            return gpus, migs
        for gpu in gpus:
            if gpu.uuid in lost:
                self._lost[gpu.index] = (gpu.uuid, gpu.model_name)
        down = [
            GpuTelemetry(index=g.index, uuid=g.uuid, model_name=g.model_name, up=False)
            if g.uuid in lost
            else g
            for g in gpus
        ]
        return down, [m for m in migs if m.gpu_uuid not in lost]

    def _nvlink_pairs(self, handles: dict[int, Any]) -> frozenset[tuple[int, int]]:
        """Ordered pairs with NVLink peer-to-peer (NVML_P2P_CAPS_INDEX_NVLINK is OK)."""
        nvml = self.nvml
        pairs: set[tuple[int, int]] = set()
        for i, hi in handles.items():
            for j, hj in handles.items():
                if i == j:
                    continue
                try:
                    status = nvml.nvmlDeviceGetP2PStatus(hi, hj, nvml.NVML_P2P_CAPS_INDEX_NVLINK)
                except nvml.NVMLError as err:
                    self.errors[error_kind(err)] += 1
                    continue
                if status == nvml.NVML_P2P_STATUS_OK:
                    pairs.add((i, j))
        return frozenset(pairs)


def _milli(value: Any) -> float | None:
    """NVML's milliwatts and millijoules in watts and joules."""
    return None if value is None else value / 1000


def _scaled(value: Any, unit: int) -> float | None:
    """A whole count of ``unit`` (MHz, KiB/s), as NVML answers it, in base units."""
    return None if value is None else float(value * unit)


def _profile(name: str) -> str | None:
    match = _PROFILE.search(name)
    return match.group(1) if match else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)
