"""A link between GPUs as the communication model sees it: its kind, bandwidth and
start-up latency.

Kept apart from :mod:`gpuplan.core.perf.comm`, which is compiled and so holds no Struct
(docs/architecture.md, "The compiled core").
"""

from typing import Literal

from gpuplan.core.record import Record

LinkKind = Literal["nvlink", "pcie", "network", "none"]


class Link(Record, kw_only=True):
    kind: LinkKind
    bytes_per_s: float
    """Per direction."""

    latency_s: float
