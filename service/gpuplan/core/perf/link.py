"""A link between GPUs as the communication model sees it: its kind, bandwidth and
start-up latency.

Kept apart from :mod:`gpuplan.core.perf.comm`, whose functions mypyc compiles
(``[tool.gpuplan] compiled`` in pyproject.toml): mypyc builds a class it does not compile
without its keyword arguments, so the Struct's ``kw_only=True`` would be lost there.
"""

from typing import Literal

from gpuplan.core.record import Record

LinkKind = Literal["nvlink", "pcie", "network", "none"]


class Link(Record, kw_only=True):
    kind: LinkKind
    bytes_per_s: float
    """Per direction."""

    latency_s: float
