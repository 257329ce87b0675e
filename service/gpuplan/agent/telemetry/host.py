"""The host's CPU and memory, from /proc where Linux offers it."""

import os
import platform
from pathlib import Path

from gpuplan.core.fleet import CpuInfo


def _cpuinfo_model(text: str) -> str | None:
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
            return value.strip()
    return None


def _meminfo_total(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024  # the kernel's "kB" is KiB
    return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_info() -> CpuInfo:
    """The CPU model, the CPUs this process may use, and total host memory."""
    model = _cpuinfo_model(_read("/proc/cpuinfo")) or platform.processor() or platform.machine()
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return CpuInfo(
        model_name=model[:256] or "unknown",
        logical_cpus=cpus,
        memory_total_bytes=_meminfo_total(_read("/proc/meminfo")),
    )
