"""Efficiency defaults of the speed model, stored as data (data/efficiency.toml).

A datasheet peak is what no real job reaches: a training step mixes large GEMMs with
norms, softmax, communication waits and kernel launches. The model multiplies the
peak by a model-FLOPs utilization (MFU) per GPU class, and decode's bandwidth by a
memory-bandwidth utilization (MBU). The defaults carry their sources and are
overridable per request; a fleet measurement replaces the datasheet peak.
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Annotated

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.record import Record

Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]


class EfficiencyClass(Record, kw_only=True):
    name: str
    match: list[str]
    mfu: Fraction
    mbu: Fraction
    verified: bool
    source: str


class Latency(Record, kw_only=True):
    nvlink_seconds: float
    pcie_seconds: float
    network_seconds: float
    verified: bool
    source: str


class Overlap(Record, kw_only=True):
    backward_fraction: Fraction
    verified: bool
    source: str


class Vision(Record, kw_only=True):
    mfu_factor: Fraction
    """Multiplies a class's MFU for convolutional and vision models."""

    verified: bool
    source: str


class EfficiencyData(Record, kw_only=True):
    classes: list[EfficiencyClass] = msgspec.field(name="class")
    latency: Latency
    overlap: Overlap
    vision: Vision


@cache
def efficiency_data() -> EfficiencyData:
    """The shipped defaults, validated at load (a malformed file fails at import time)."""
    text = resources.files("gpuplan.core.perf.data").joinpath("efficiency.toml").read_text("utf-8")
    data = msgspec.convert(tomllib.loads(text), EfficiencyData)
    if not data.classes or data.classes[-1].match:
        raise ValueError("efficiency.toml: the last class must be the catch-all (empty match)")
    return data


def efficiency_class(gpu: GpuSpec) -> EfficiencyClass:
    """The first class naming a word of the GPU's architecture or id."""
    text = f"{gpu.architecture} {gpu.id}".lower()
    for cls in efficiency_data().classes:
        if not cls.match or any(word in text for word in cls.match):
            return cls
    raise AssertionError("unreachable: the last class matches everything")
