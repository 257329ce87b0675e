"""What a telemetry backend returns, and the interface every backend implements.

A backend (NVML, amd-smi, or none) turns one sweep of the driver into plain
Structs. It never raises for a single field: a field the device does not support
is ``None`` and listed, a lost GPU is reported ``up=False``; only a failure of the
whole library (the driver unloaded) raises :class:`TelemetryError`.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Literal, Protocol

from gpuplan.core.errors import GpuplanError
from gpuplan.core.fleet import GpuTelemetry, MigInstance

Vendor = Literal["nvidia", "amd", "none"]


class TelemetryError(GpuplanError, RuntimeError):
    """The telemetry library as a whole failed; the sweep has no data."""


@dataclass
class Sweep:
    """One reading of every device on the node."""

    vendor: Vendor
    driver_version: str | None = None
    gpus: list[GpuTelemetry] = field(default_factory=list)
    mig_instances: list[MigInstance] = field(default_factory=list)
    nvlink_pairs: frozenset[tuple[int, int]] = frozenset()
    """Ordered GPU index pairs joined by NVLink (for labelling device-to-device copies)."""


class TelemetrySource(Protocol):
    """A telemetry backend. ``errors`` counts failures by kind since start."""

    vendor: Vendor
    errors: Counter[str]

    def collect(self, node: str) -> Sweep: ...

    def close(self) -> None: ...


class NoGpuSource:
    """A node without GPUs (or without a driver): an empty sweep, every time."""

    vendor: Vendor = "none"

    def __init__(self) -> None:
        self.errors: Counter[str] = Counter()

    def collect(self, node: str) -> Sweep:
        return Sweep(vendor="none")

    def close(self) -> None:
        pass
