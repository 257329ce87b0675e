"""NCCL's and RCCL's tuner constants for a small all-reduce (data/collectives.toml),
validated at first use.

Kept apart from :mod:`gpuplan.core.perf.collectives`, which is compiled and so holds no Struct
(docs/architecture.md, "The compiled core").
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Literal

import msgspec

Library = Literal["nccl", "rccl"]


class CollectiveLibrary(msgspec.Struct, kw_only=True, frozen=True):
    name: Library
    base_latency_seconds: float
    """``baseLat`` of the ring LL all-reduce."""

    hop_latency_seconds: dict[str, float]
    """``hwLat`` of one ring step by link kind (nvlink, pcie, network)."""

    ll_bandwidth_share: float
    """LL's bus bandwidth as a share of the link's."""

    ll_max_bus_bytes_per_s: float
    source: str


class _Data(msgspec.Struct, kw_only=True, frozen=True):
    library: list[CollectiveLibrary]


@cache
def collective_libraries() -> dict[Library, CollectiveLibrary]:
    """The shipped tuner constants by library, validated at first use."""
    text = resources.files("gpuplan.core.perf.data").joinpath("collectives.toml").read_text("utf-8")
    data = msgspec.convert(tomllib.loads(text), _Data)
    out = {lib.name: lib for lib in data.library}
    for lib in out.values():
        if set(lib.hop_latency_seconds) != {"nvlink", "pcie", "network"}:
            raise ValueError(f"collectives.toml: {lib.name} needs nvlink, pcie and network hops")
    return out
