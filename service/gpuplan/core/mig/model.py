"""The MIG data Structs: one :class:`MigGpu` per slice geometry, one :class:`MigProfile` per
GPU-instance profile.

A GPU in MIG mode has ``memory_slices`` memory slices (8; 4 on A30 and RTX PRO 6000; 2 on
RTX PRO 5000) and ``compute_slices`` compute slices. A GPU instance (GI) takes a run of
memory slices that must start at one of its profile's ``placements`` (NVML's ``{start,
size}``, in memory slices) and may not overlap another GI; its compute slices are counted,
not placed. The ``gb`` number in a profile's name is rounded marketing: ``memory_bytes`` is
what the driver reports, and fit decisions use only that.
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.catalog.model import Source
from gpuplan.core.record import Record

ProfileName = Annotated[
    str, msgspec.Meta(pattern=r"^[1-8]g\.[0-9]+gb([+-][a-z]+(\.[a-z]+)?)?$", max_length=32)
]
Engine = Literal["decoders", "encoders", "jpeg", "ofa", "copy"]
ProfileField = Literal["memory_bytes", "placements", "engines", "max_count", "profile_id"]


class Engines(Record):
    """Media and copy engines a GI owns (NVDEC, NVENC, NVJPG, OFA, copy engines)."""

    decoders: Annotated[int, msgspec.Meta(ge=0)] = 0
    encoders: Annotated[int, msgspec.Meta(ge=0)] = 0
    jpeg: Annotated[int, msgspec.Meta(ge=0)] = 0
    ofa: Annotated[int, msgspec.Meta(ge=0)] = 0
    copy: Annotated[int, msgspec.Meta(ge=0)] = 0


class MigProfile(Record, kw_only=True):
    """One GPU-instance profile of one slice geometry."""

    name: ProfileName
    """nvidia-smi's name without ``MIG ``: ``3g.40gb``, ``1g.10gb+me``."""

    profile_id: int | None = None
    """nvidia-smi GI profile ID (``-cgi 9``), where a capture confirms it; IDs are
    device- and driver-specific, so names are the stable handle."""

    compute_slices: Annotated[int, msgspec.Meta(ge=1, le=8)]
    memory_slices: Annotated[int, msgspec.Meta(ge=1, le=8)]
    memory_bytes: Annotated[int, msgspec.Meta(gt=0)]
    """Usable memory as the driver reports it (``nvidia-smi mig -lgip``), not the name."""

    max_count: Annotated[int, msgspec.Meta(ge=1, le=8)]
    """Most GIs of this profile on one GPU."""

    placements: list[Annotated[int, msgspec.Meta(ge=0, le=7)]]
    """Valid start slots; the GI then occupies ``memory_slices`` slots from there."""

    engines: Engines | None = None
    """Engines the GI owns; absent where no source gives them."""

    sources: dict[str, list[Source]] = {}
    """Field to the sources of its value (``memory_bytes``, ``placements``)."""

    unverified: list[ProfileField] = []
    """Fields not confirmed on hardware (derived, assumed from a sibling GPU, or a mock)."""


class MigGpu(Record, kw_only=True):
    """The MIG geometry shared by one or more catalog SKUs."""

    id: str
    """Slug of the geometry, e.g. ``a100-80gb``."""

    gpus: list[str]
    """Catalog ids that use this table."""

    memory_slices: Literal[2, 4, 8]
    compute_slices: Annotated[int, msgspec.Meta(ge=1, le=8)]
    max_instances: Annotated[int, msgspec.Meta(ge=1, le=8)]
    engine_budget: list[Engine] = []
    """Engines whose per-GPU total (that of the full-GPU profile) bounds the sum over
    GIs: this is what makes ``+me`` profiles one per GPU (a single OFA). Only engines
    whose table is consistent are listed (the User Guide prints one NVDEC on every
    B200 row; the data holds the driver's counts instead, so B200 budgets NVDEC and
    JPEG like Hopper), and none where a table's engines are partly unknown."""

    profiles: list[MigProfile]
    sources: list[Source] = []
    """Where the profile rows (names, slices, engines, counts) come from."""

    @property
    def unverified(self) -> bool:
        return any(p.unverified for p in self.profiles)
