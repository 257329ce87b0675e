"""A job's bytes on one GPU by the tool that reads them: what the estimate's answer and
the search's sizing share.

Kept apart from :mod:`gpuplan.core.memory.response`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

from gpuplan.core.memory.intervals import Figure
from gpuplan.core.record import Record


class Measures(Record, kw_only=True):
    """A job's bytes on one GPU by the tool that reads them (see overhead.py)."""

    peak: int
    reserved: int
    device: int
    required: int
    intervals: dict[Figure, tuple[int, int]] = {}
    """90% intervals of ``peak_bytes``, ``reserved_bytes``, ``device_bytes`` (low, high)."""
    workspaces: int
    cache: int
    context: int
    nccl: int
    notes: list[str]
