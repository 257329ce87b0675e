"""How the NVML collectors name a failure, so every counter label is bounded and alike.

Shared by the per-field collector (:mod:`~gpuplan.agent.telemetry.nvml`) and the GPM
sampler (:mod:`~gpuplan.agent.telemetry.gpm`): both count errors by these names in
``gpuplan_agent_collector_errors_total{error}``, and both stop querying a GPU that fell
off the bus.
"""

import re


class Lost(Exception):
    """The GPU fell off the bus (NVML_ERROR_GPU_IS_LOST)."""


def error_kind(err: Exception) -> str:
    """``NVMLError_NoPermission`` -> ``no_permission``: a bounded label value."""
    name = type(err).__name__.removeprefix("NVMLError_") or "unknown"
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() if name != "NVMLError" else "unknown"
