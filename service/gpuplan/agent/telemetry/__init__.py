"""Telemetry backends: NVML for NVIDIA, amd-smi for AMD, and none.

:func:`open_source` picks the backend the node supports; each library is imported
only when tried, so a CPU-only node needs neither.
"""

import logging
from typing import Literal

from gpuplan.agent.telemetry.base import NoGpuSource, Sweep, TelemetryError, TelemetrySource

Backend = Literal["auto", "nvidia", "amd", "none"]

log = logging.getLogger("gpuplan.agent")


def _open_nvml() -> TelemetrySource:
    try:
        import pynvml
    except ImportError as err:
        raise TelemetryError(
            "nvidia-ml-py is not installed (pip install 'gpuplan[agent]')"
        ) from err
    from gpuplan.agent.telemetry.nvml import NvmlSource

    return NvmlSource(pynvml)


def _open_amd() -> TelemetrySource:
    try:
        import amdsmi
    except ImportError as err:
        raise TelemetryError("amdsmi is not installed (it ships with ROCm)") from err
    from gpuplan.agent.telemetry.amd import AmdSource

    return AmdSource(amdsmi)


def open_source(backend: Backend) -> TelemetrySource:
    """The named backend (raising :class:`TelemetryError` if it cannot start), or
    for ``auto`` the first of NVML, amd-smi that starts, else none."""
    if backend == "nvidia":
        return _open_nvml()
    if backend == "amd":
        return _open_amd()
    if backend == "none":
        return NoGpuSource()
    for opener in (_open_nvml, _open_amd):
        try:
            source = opener()
        except TelemetryError as err:
            log.info("telemetry backend unavailable: %s", err)
            continue
        try:
            if source.collect("probe").gpus:
                return source
        except TelemetryError as err:
            log.info("telemetry backend found no devices: %s", err)
        source.close()
    return NoGpuSource()


__all__ = ["Backend", "NoGpuSource", "Sweep", "TelemetryError", "TelemetrySource", "open_source"]
