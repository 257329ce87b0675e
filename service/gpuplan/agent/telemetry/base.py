"""What a telemetry backend returns, and the interface every backend implements.

A backend (NVML, amd-smi, or none) turns one sweep of the driver into plain
Structs. It never raises for a single field: a field the device does not support
is ``None`` and listed, a lost GPU is reported ``up=False``; only a failure of the
whole library (the driver unloaded) raises :class:`TelemetryError`.
"""

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

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


class GuardedSource:
    """The guarded-field rule of the vendor backends (NVML, amd-smi), written once.

    Each field is one library call made through :meth:`_get`: a call the device does not
    support marks that field of that GPU unsupported, is counted once and is never made
    again, so one bad field never costs the sweep. A backend names its library's start
    and stop functions and says, in :meth:`_is_unsupported`, which failures mean that.
    """

    vendor: Vendor
    LIBRARY: ClassVar[str]
    """The library's name in messages."""

    INIT: ClassVar[str]
    SHUTDOWN: ClassVar[str]

    def __init__(self, library: Any, error: type[Exception], *init_args: Any) -> None:
        self._library = library
        self._error = error
        self.errors: Counter[str] = Counter()
        self._unsupported: set[tuple[str, str]] = set()
        try:
            getattr(library, self.INIT)(*init_args)
        except error as err:
            raise TelemetryError(f"{self.LIBRARY} did not initialise: {err}") from err

    def close(self) -> None:
        try:
            getattr(self._library, self.SHUTDOWN)()
        except self._error:
            self.errors["shutdown"] += 1

    def _get(self, key: str, field: str, missing: list[str], fn: str, *args: Any) -> Any:
        """``fn(*args)``, or None with ``field`` recorded in ``missing`` when unsupported."""
        if (key, field) in self._unsupported:
            missing.append(field)
            return None
        try:
            return getattr(self._library, fn)(*args)
        except self._error as err:
            if self._is_unsupported(err):
                self._unsupported.add((key, field))
                self.errors["not_supported"] += 1
                missing.append(field)
            return None

    def _is_unsupported(self, err: Exception) -> bool:
        """Whether ``err`` means the device lacks the field; a backend that says no for
        some errors counts (or raises) them itself. Here every error does."""
        return True


class NoGpuSource:
    """A node without GPUs (or without a driver): an empty sweep, every time."""

    vendor: Vendor = "none"

    def __init__(self) -> None:
        self.errors: Counter[str] = Counter()

    def collect(self, node: str) -> Sweep:
        return Sweep(vendor="none")

    def close(self) -> None:
        pass
