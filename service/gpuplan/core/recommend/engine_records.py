"""Each serving engine's memory rule, defaults and flag names as ``data/engines.toml``
states them, and how one GPU of a replica is filled.

Kept apart from :mod:`gpuplan.core.recommend.engine`, which is compiled and so holds no
Struct (docs/architecture.md, "The compiled core").
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.recommend.schema import Engine
from gpuplan.core.record import Record

MemoryRule = Literal["of_total", "of_free_before_load", "of_free_after_profile", "static"]
Positive = Annotated[int, msgspec.Meta(ge=0)]
MIB = 1 << 20


class SglangTier(Record, kw_only=True):
    """SGLang's defaults for GPUs of less than ``below_mib`` MiB."""

    below_mib: float
    chunked_prefill_size: Annotated[int, msgspec.Meta(ge=1)]
    graph_max_bs: Annotated[int, msgspec.Meta(ge=0)]
    graph_max_bs_tp4: Annotated[int, msgspec.Meta(ge=0)]
    """The decode graphs' batch at tensor parallel 4 and more."""


class EngineSpec(Record, kw_only=True):
    """One engine's memory rule, defaults and flag names (``data/engines.toml``)."""

    program: list[str]
    program_tp: list[str] = []
    """The launcher of a multi-GPU replica, when it is not the program itself."""

    source: str
    paged: bool
    memory_rule: MemoryRule
    memory_fraction: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    """The share a plan sets when the request gives none (SGLang: computed)."""

    memory_fraction_source: str | None = None
    kv_block_tokens: Annotated[int, msgspec.Meta(ge=1)]
    profile_tokens: Literal["token_budget", "none"]
    profile_logits: bool
    graph_max_tokens: Positive
    graph_tokens_per_sequence: Positive
    cap_default: Literal["serving_defaults", "sglang_pool", "batch"]
    """Where the sequence cap comes from when the request sets none."""

    budget_default: Literal["serving_defaults", "sglang_tiers", "batch"]
    """Where the tokens of one step come from when the request sets none."""
    max_tensor_parallel: Annotated[int, msgspec.Meta(ge=1)] | None = None
    flags: dict[str, str]
    tiers: list[SglangTier] = []
    graph_tp4_from: int = 4
    """The tensor-parallel degree from which a tier's ``graph_max_bs_tp4`` applies."""
    reserve_base_mib: float = 0.0
    reserve_mib_per_activation_token: float = 0.0
    reserve_min_activation_tokens: int = 0
    reserve_mib_per_eighth_of_tp: float = 0.0
    reserve_mib_per_graph_batch: float = 0.0
    reserve_floor_mib: float = 0.0
    reserve_floor_above_mib: float = 0.0
    pool_requests_per_context: int = 0
    pool_requests_min: int = 0
    pool_requests_max: int = 0
    overlap_from_version: str | None = None
    """The first version whose scheduler prepares the next step while the GPU runs this
    one (None: every version the plans name does, or the source says nothing)."""

    serial_step_factor: Annotated[float, msgspec.Meta(ge=1)] = 1.0
    """Before ``overlap_from_version``: a step's time over its GPU time, the host's
    scheduling done in series with the GPU's work."""

    serial_step_source: str | None = None


class EnginesData(Record, kw_only=True):
    engines: dict[Engine, EngineSpec]
    kubernetes: dict[str, str]
    """Vendor -> the Kubernetes resource of one GPU."""


class EngineMemory(Record, kw_only=True):
    """One GPU of a replica as the engine fills it."""

    fraction: float | None
    """The share the command sets (None for a static engine)."""

    static_bytes: float
    """What the engine holds beside the KV cache: weights, runtime, the profile peak and
    the CUDA-graph pool."""

    kv_budget_bytes: float
    """The KV cache the engine's rule leaves (negative: not even the weights fit)."""

    reserve_note: str | None = None
    """SGLang: a note when the activations may outgrow what the fraction leaves."""
