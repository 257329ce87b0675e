"""Traced estimates, the pure half: what a recorded allocation log means.

The torch adapter (:mod:`gpuplan.trace`) runs a model on fake tensors and records
every tensor storage it creates and frees as a :class:`~gpuplan.core.trace.log.TraceLog`.
Everything after that is arithmetic over the log, done here without torch: the peak
and its breakdown, the peak of each phase, the modules holding memory at the peak,
and, for ``runtime: cuda``, a replay of the log through a model of PyTorch's CUDA
caching allocator.
"""

from gpuplan.core.trace.allocator import AllocatorStats, simulate
from gpuplan.core.trace.analyze import analyze
from gpuplan.core.trace.log import Category, Event, Phase, TraceLog
from gpuplan.core.trace.schema import (
    ModuleMemory,
    PhasePeaks,
    TraceBreakdown,
    TraceModel,
    TraceRequest,
    TraceResult,
    TraceWorkload,
)

__all__ = [
    "AllocatorStats",
    "Category",
    "Event",
    "ModuleMemory",
    "Phase",
    "PhasePeaks",
    "TraceBreakdown",
    "TraceLog",
    "TraceModel",
    "TraceRequest",
    "TraceResult",
    "TraceWorkload",
    "analyze",
    "simulate",
]
