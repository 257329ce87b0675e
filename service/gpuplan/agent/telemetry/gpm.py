"""What the SMs did: GPU Performance Monitoring (GPM) per GPU and per MIG GPU instance.

NVML's ``utilization.gpu`` is the share of time *any* kernel ran, so one busy SM of
132 reads 100%, and a MIG instance has no reading at all (dcgm-exporter #216, #430).
GPM counts the SMs' work instead, on Hopper and newer GPUs (nvml.h of NVML API 13,
"For Hopper or newer fully supported devices"; the GPM functions are in the R525
reference): a metric is computed by ``nvmlGpmMetricsGet`` between two samples taken
more than 100 ms apart, of the whole GPU (``nvmlGpmSampleGet``) or of one MIG GPU
instance (``nvmlGpmMigSampleGet``).

The sampler keeps the last sample of every source across sweeps, so a sweep's values
are the average since the previous sweep; a source seen for the first time is sampled
twice, :data:`SETTLE_SECONDS` apart, within its first sweep. A source is a GPU, or a
GPU instance identified by its MIG devices as well as its id (NVML reuses GPU-instance
ids after a reconfiguration; a sample of the old instance must not be diffed against
the new one).

Nothing here publishes a made-up value: an unsupported GPU, a failed call, or a
metric answered with an error or outside 0-100% leaves the field ``None`` and is
counted in ``errors`` as ``gpm_<reason>``; ``not_supported`` kinds once per source
and field, since they are never retried.
"""

import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from gpuplan.agent.telemetry.nvml_errors import Lost, error_kind
from gpuplan.core.fleet import GpuTelemetry, MigInstance

SETTLE_SECONDS = 0.2
"""Between the two samples of a first sweep: nvml.h asks for more than 100 ms."""

# Field of GpuTelemetry and MigInstance -> NVML_GPM_METRIC_* (pynvml, nvml.h).
METRICS: dict[str, str] = {
    "sm_activity_ratio": "NVML_GPM_METRIC_SM_UTIL",  # % of SMs busy
    "tensor_activity_ratio": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",  # % of time on tensor cores
    "dram_activity_ratio": "NVML_GPM_METRIC_DRAM_BW_UTIL",  # % of peak DRAM bandwidth
}
FIELDS = tuple(METRICS)
_ROUNDING = 0.01
"""Percent a value may stray past 0-100 from rounding before it is refused, not clamped."""


@dataclass(frozen=True)
class Source:
    """What one GPM sample measures: a GPU, or one GPU instance of a MIG GPU."""

    gpu_uuid: str
    gpu_instance_id: int | None = None
    members: tuple[str, ...] = ()
    """MIG uuids of the GPU instance: a reused id with other members is a new source."""

    mig_enabled: bool = False
    """Of a whole GPU: MIG mode on (its answers may differ once MIG mode changes)."""


@dataclass
class Measured:
    """One sweep's GPM values by source, and what went wrong."""

    values: dict[Source, dict[str, float]]
    unsupported: dict[Source, set[str]]
    """Fields a source never answers (the GPU lacks GPM, or the metric is refused)."""

    lost: set[str]
    """GPUs that fell off the bus while being sampled."""


class GpmSampler:
    """Samples GPM sources each sweep and computes their metrics since the previous one.

    ``nvml`` is ``pynvml`` or a recording proxy; ``errors`` is the collector's counter.
    """

    def __init__(
        self,
        nvml: Any,
        errors: Counter[str],
        settle_seconds: float = SETTLE_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.nvml = nvml
        self.errors = errors
        self.settle_seconds = settle_seconds
        self.sleep = sleep
        self._ids = {field: int(getattr(nvml, name)) for field, name in METRICS.items()}
        self._support: dict[str, bool] = {}
        self._refused: set[Source] = set()
        self._refused_fields: dict[Source, set[str]] = {}
        self._previous: dict[Source, Any] = {}
        self._skip = {
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
            nvml.NVML_ERROR_NO_PERMISSION,
        }

    def supported(self, uuid: str, handle: Any) -> bool | None:
        """Whether the GPU supports GPM (asked once); None when the query failed now.
        Raises :class:`Lost` when the GPU fell off the bus."""
        if uuid in self._support:
            return self._support[uuid]
        nvml = self.nvml
        try:
            answer = nvml.nvmlGpmQueryDeviceSupport(handle)
        except nvml.NVMLError as err:
            if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                self.errors["gpu_lost"] += 1
                raise Lost from err
            self.errors["gpm_" + error_kind(err)] += 1
            if err.value in self._skip:  # pre-Hopper, a driver before GPM, or no permission
                self._support[uuid] = False
                return False
            return None
        self._support[uuid] = bool(answer.isSupportedDevice)
        if not self._support[uuid]:
            self.errors["gpm_not_supported"] += 1
        return self._support[uuid]

    def measure(self, sources: Iterable[tuple[Source, Any]]) -> Measured:
        """Sample every source once (twice when new) and compute its metrics.

        ``sources`` pairs each source with its GPU's handle. Samples of sources not
        given (a destroyed GPU instance, a lost GPU) are freed.
        """
        given = list(sources)
        lost: set[str] = set()
        values: dict[Source, dict[str, float]] = {}
        for source, (before, after) in self._pairs(given, lost).items():
            if source.gpu_uuid not in lost:
                values[source] = self._metrics(source, before, after, lost)
            self._free(before)
            self._previous[source] = after
        keep = {source for source, _ in given if source.gpu_uuid not in lost}
        for gone in [s for s in self._previous if s not in keep or s in self._refused]:
            self._free(self._previous.pop(gone))
        for gone in [s for s in self._refused_fields if s not in keep]:
            del self._refused_fields[gone]
        unsupported = {s: set(FIELDS) for s in keep if s in self._refused}
        for source, fields in self._refused_fields.items():
            unsupported.setdefault(source, set()).update(fields)
        return Measured(values=values, unsupported=unsupported, lost=lost)

    def _pairs(
        self, given: list[tuple[Source, Any]], lost: set[str]
    ) -> dict[Source, tuple[Any, Any]]:
        """(earlier, newer) sample of each source: the one kept from the previous sweep
        and one taken now, or two taken now around one settle for a new source."""
        pairs: dict[Source, tuple[Any, Any]] = {}
        fresh: list[tuple[Source, Any, Any]] = []
        for source, handle in given:
            if source in self._refused or source.gpu_uuid in lost:
                continue
            sample = self._take(source, handle, lost)
            if sample is None:
                continue
            if source in self._previous:
                pairs[source] = (self._previous.pop(source), sample)
            else:
                fresh.append((source, handle, sample))
        if fresh:
            self.sleep(self.settle_seconds)
        for source, handle, first in fresh:
            second = None if source.gpu_uuid in lost else self._take(source, handle, lost)
            if second is None:
                self._free(first)
            else:
                pairs[source] = (first, second)
        return pairs

    def close(self) -> None:
        """Free every kept sample (before NVML shuts down)."""
        for sample in self._previous.values():
            self._free(sample)
        self._previous.clear()

    # -- one call each -------------------------------------------------------------

    def _take(self, source: Source, handle: Any, lost: set[str]) -> Any:
        """A new sample of ``source``, or None (counted) when a call failed."""
        nvml = self.nvml
        try:
            sample = nvml.nvmlGpmSampleAlloc()
        except nvml.NVMLError as err:
            self.errors["gpm_" + error_kind(err)] += 1
            return None
        try:
            if source.gpu_instance_id is None:
                nvml.nvmlGpmSampleGet(handle, sample)
            else:
                nvml.nvmlGpmMigSampleGet(handle, source.gpu_instance_id, sample)
        except nvml.NVMLError as err:
            self._free(sample)
            if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                self.errors["gpu_lost"] += 1
                lost.add(source.gpu_uuid)
            elif err.value in self._skip:  # this source has no GPM (never asked again)
                self._refused.add(source)
                self.errors["gpm_" + error_kind(err)] += 1
            else:
                self.errors["gpm_" + error_kind(err)] += 1
            return None
        return sample

    def _metrics(self, source: Source, before: Any, after: Any, lost: set[str]) -> dict[str, float]:
        """The metrics between two samples, as ratios; fields that failed are left out."""
        nvml = self.nvml
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self._ids)
        request.sample1, request.sample2 = before, after
        for slot, metric_id in enumerate(self._ids.values()):
            request.metrics[slot].metricId = metric_id
        try:
            nvml.nvmlGpmMetricsGet(request)
        except nvml.NVMLError as err:
            if err.value == nvml.NVML_ERROR_GPU_IS_LOST:
                self.errors["gpu_lost"] += 1
                lost.add(source.gpu_uuid)
            else:
                self.errors["gpm_" + error_kind(err)] += 1
            return {}
        out: dict[str, float] = {}
        refused = self._refused_fields.setdefault(source, set())
        for slot, field in enumerate(self._ids):
            metric = request.metrics[slot]
            code = int(metric.nvmlReturn)
            if code != nvml.NVML_SUCCESS:
                if code in self._skip:
                    if field not in refused:
                        refused.add(field)
                        self.errors["gpm_" + error_kind(nvml.NVMLError(code))] += 1
                else:
                    self.errors["gpm_" + error_kind(nvml.NVMLError(code))] += 1
                continue
            percent = float(metric.value)
            if not math.isfinite(percent) or not -_ROUNDING <= percent <= 100 + _ROUNDING:
                self.errors["gpm_invalid_value"] += 1
                continue
            out[field] = min(max(percent, 0.0), 100.0) / 100
        if not refused:
            del self._refused_fields[source]
        return out

    def _free(self, sample: Any) -> None:
        nvml = self.nvml
        try:
            nvml.nvmlGpmSampleFree(sample)
        except nvml.NVMLError as err:
            self.errors["gpm_" + error_kind(err)] += 1


def read_activity(
    sampler: GpmSampler,
    gpus: list[GpuTelemetry],
    migs: list[MigInstance],
    handles: dict[int, Any],
) -> set[str]:
    """Fill the GPM fields of ``gpus`` (those with a handle) and of their ``migs``.

    A GPU without GPM lists the fields in its ``unsupported_fields``, as does one whose
    whole-GPU sample or metric is refused; a GPU instance's refusals are only counted
    (a MIG instance has no such list). Returns the uuids of GPUs lost meanwhile.
    """
    sources, lost = _sources(sampler, gpus, migs, handles)
    measured = sampler.measure(sources)
    by_uuid = {g.uuid: g for g in gpus}
    for source, values in measured.values.items():
        targets: list[GpuTelemetry] | list[MigInstance]
        if source.gpu_instance_id is None:
            targets = [by_uuid[source.gpu_uuid]]
        else:
            targets = [m for m in migs if m.mig_uuid in source.members]
        for target in targets:
            for field, value in values.items():
                setattr(target, field, value)
    for source, fields in measured.unsupported.items():
        if source.gpu_instance_id is None:
            gpu = by_uuid[source.gpu_uuid]
            gpu.unsupported_fields = sorted({*gpu.unsupported_fields, *fields})
    return lost | measured.lost


def _sources(
    sampler: GpmSampler,
    gpus: list[GpuTelemetry],
    migs: list[MigInstance],
    handles: dict[int, Any],
) -> tuple[list[tuple[Source, Any]], set[str]]:
    """Each GPU that supports GPM and each of its GPU instances, with the GPU's handle;
    and the GPUs lost while asked whether they support it."""
    sources: list[tuple[Source, Any]] = []
    lost: set[str] = set()
    for gpu in gpus:
        handle = handles.get(gpu.index)
        if handle is None:
            continue
        try:
            support = sampler.supported(gpu.uuid, handle)
        except Lost:
            lost.add(gpu.uuid)
            continue
        if support is False:
            gpu.unsupported_fields = sorted({*gpu.unsupported_fields, *FIELDS})
        if not support:
            continue
        sources.append((Source(gpu.uuid, mig_enabled=bool(gpu.mig_enabled)), handle))
        members: dict[int, list[str]] = {}
        for m in migs:
            if m.gpu_uuid == gpu.uuid:
                members.setdefault(m.gpu_instance_id, []).append(m.mig_uuid)
        for gi, uuids in sorted(members.items()):
            sources.append((Source(gpu.uuid, gi, tuple(sorted(uuids))), handle))
    return sources, lost
