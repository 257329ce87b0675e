"""Kernel times measured on the GPU, where a table covers it (data/kernels/*.json).

A fitted efficiency per GPU generation cannot tell a GEMM apart from the framework
around it. For the GPUs NVIDIA's AIConfigurator measured (its ``aiconfigurator-core``
data package: GEMM latency by ``m, n, k`` and dtype, context and generation attention),
``bench/kernels/derive.py`` writes a compact grid per GPU with its provenance, and this
module times a kernel by interpolating it:

- multilinear in ``log`` of every axis and of the latency, so a grid point answers its
  measured value exactly and between points the latency follows a power law;
- outside the grid, clamped to its edge and extrapolated by the roofline: above the
  largest measured size time grows in proportion to the work (a GEMM's ``m``, ``n`` or
  ``k``; an attention's sequences x heads and keys, the prompt length squared for a
  causal prefill); below the smallest it stays at the edge's time (a kernel's latency
  floor). Attention is measured at head size 128; another head size scales the time
  by ``head_dim / 128`` (its work).

GPUs without a table keep the roofline-and-efficiency model
(:mod:`gpuplan.core.perf.efficiency`); each answer names which one timed it.
"""

import bisect
import json
import math
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal, Protocol

import msgspec

KernelSource = Literal["measured", "roofline"]


class RatesLike(Protocol):
    """What :func:`kernels_used` reads of :class:`gpuplan.core.perf.step_records.Rates`."""

    @property
    def kernel_table(self) -> str | None: ...

    @property
    def kernel_source(self) -> KernelSource: ...


class Grid:
    """Latencies on the product of ``axes`` (row-major, last axis fastest), with their
    logarithms computed once at load."""

    __slots__ = ("axes", "latency_us", "log_axes", "log_latency", "strides")

    def __init__(self, axes: list[list[float]], latency_us: list[float]) -> None:
        size = math.prod(len(a) for a in axes)
        if size != len(latency_us):
            raise ValueError(f"grid of {size} cells holds {len(latency_us)} latencies")
        for a in axes:
            if not a or any(x <= 0 for x in a) or a != sorted(set(a)):
                raise ValueError(f"grid axis {a} is not positive and strictly increasing")
        if any(not x > 0 for x in latency_us):
            raise ValueError("grid latencies must be positive")
        self.axes = axes
        self.latency_us = latency_us
        self.log_axes = [[math.log(x) for x in a] for a in axes]
        self.log_latency = [math.log(x) for x in latency_us]
        self.strides = [math.prod(len(a) for a in axes[d + 1 :]) for d in range(len(axes))]

    def seconds(self, point: tuple[float, ...], powers: tuple[float, ...]) -> float:
        """The interpolated latency at ``point``; past an axis's largest value the time
        grows as ``(x / largest) ** power`` (the roofline), below its smallest it stays."""
        scale = 1.0
        coords: list[tuple[int, float]] = []
        for x, axis, logs, power in zip(point, self.axes, self.log_axes, powers, strict=True):
            if x >= axis[-1]:
                scale *= (x / axis[-1]) ** power
                coords.append((len(axis) - 1, 0.0))
                continue
            if x <= axis[0]:
                coords.append((0, 0.0))
                continue
            i = bisect.bisect_right(axis, x) - 1
            coords.append((i, (math.log(x) - logs[i]) / (logs[i + 1] - logs[i])))
        strides = self.strides
        total = 0.0
        for corner in range(1 << len(coords)):
            weight, index = 1.0, 0
            for d, (i, f) in enumerate(coords):
                up = (corner >> d) & 1
                if up and f == 0.0:
                    weight = 0.0
                    break
                weight *= f if up else 1.0 - f
                index += (i + up) * strides[d]
            if weight:
                total += weight * self.log_latency[index]
        return math.exp(total) * scale * 1e-6


class KernelTable(msgspec.Struct, kw_only=True, frozen=True):
    """One GPU's measured kernels and where they come from."""

    id: str
    """Provenance id: package, version, GPU folder, engine and engine version."""

    gpu: str
    catalog_ids: list[str]
    device: str
    provenance: dict[str, Any]
    gemm: dict[str, Grid]
    """By dtype (``bf16``, ``fp8``): axes ``m, n, k``."""

    context_attention: Grid | None = None
    """Causal prefill, head size 128: axes sequences x heads, prompt length."""

    generation_attention: Grid | None = None
    """One decode step, head size 128: axes sequences x KV heads, keys attended."""


HEAD_DIM = 128


def _grid(raw: dict[str, Any], names: tuple[str, ...]) -> Grid:
    return Grid(axes=[raw[n] for n in names], latency_us=raw["latency_us"])


def _table(raw: dict[str, Any]) -> KernelTable:
    prov = raw["provenance"]
    for key in ("package", "version", "wheel", "gemm"):
        if not prov.get(key):
            raise ValueError(f"kernel table {raw.get('id')}: provenance lacks {key}")
    return KernelTable(
        id=raw["id"],
        gpu=raw["gpu"],
        catalog_ids=raw["catalog_ids"],
        device=raw["device"],
        provenance=prov,
        gemm={d: _grid(g, ("m", "n", "k")) for d, g in raw["gemm"].items()},
        context_attention=(
            _grid(raw["context_attention"], ("batch_heads", "second"))
            if "context_attention" in raw
            else None
        ),
        generation_attention=(
            _grid(raw["generation_attention"], ("batch_kv_heads", "second"))
            if "generation_attention" in raw
            else None
        ),
    )


@cache
def kernel_tables() -> dict[str, KernelTable]:
    """Every shipped table by catalog id, validated at first use."""
    out: dict[str, KernelTable] = {}
    folder = resources.files("gpuplan.core.perf.data").joinpath("kernels")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        table = _table(json.loads(entry.read_text("utf-8")))
        for gpu_id in table.catalog_ids:
            if gpu_id in out:
                raise ValueError(f"kernel tables: {gpu_id} covered twice")
            out[gpu_id] = table
    return out


def table_for(gpu_id: str) -> KernelTable | None:
    return kernel_tables().get(gpu_id)


@lru_cache(maxsize=65536)
def gemm_seconds(table: str, dtype: str, m: float, n: float, k: float) -> float:
    """One ``m x k`` by ``k x n`` GEMM on the GPU of ``table`` (a catalog id).

    Multilinear interpolation is separable, so the ``n, k`` plane is interpolated once
    per shape (:func:`_m_curve`) and each ``m`` then costs one interval of that curve: a
    search meets few shapes but many row counts."""
    curve = _m_curve(table, dtype, n, k)
    return curve.seconds((m,), (1.0,))


@lru_cache(maxsize=4096)
def _m_curve(table: str, dtype: str, n: float, k: float) -> Grid:
    """The latency of ``n x k`` GEMMs at every measured ``m`` (roofline past the plane's
    edges already applied)."""
    grid = kernel_tables()[table].gemm[dtype]
    ms = grid.axes[0]
    return Grid([ms], [grid.seconds((m, n, k), (1.0, 1.0, 1.0)) * 1e6 for m in ms])


@lru_cache(maxsize=65536)
def context_attention_seconds(
    table: str, batch: float, seq: float, heads: float, head_dim: float
) -> float:
    """A causal prefill of ``batch`` prompts of ``seq`` tokens over ``heads`` heads."""
    grid = kernel_tables()[table].context_attention
    assert grid is not None
    return grid.seconds((batch * heads, seq), (1.0, 2.0)) * head_dim / HEAD_DIM


@lru_cache(maxsize=65536)
def generation_attention_seconds(
    table: str, batch: float, context: float, kv_heads: float, head_dim: float
) -> float:
    """One decode step of ``batch`` sequences attending to ``context`` keys each."""
    grid = kernel_tables()[table].generation_attention
    assert grid is not None
    return grid.seconds((batch * kv_heads, context), (1.0, 1.0)) * head_dim / HEAD_DIM


Gemm = tuple[float, float, float]
"""One GEMM of a model: (how many a pass runs, ``n``, ``k``); ``m`` is the pass's rows."""


@lru_cache(maxsize=4096)
def model_gemms(
    *, hidden: int, kv_width: int, mlp_width: int, vocab: int, tensor: int, layers: int
) -> tuple[Gemm, ...]:
    """The GEMMs of a decoder's pass on one GPU: each layer's QKV projection, attention
    output, MLP up (with its gate: the active MLP width) and down, and the output head,
    the weights split by tensor parallelism (column-parallel ``n``, row-parallel ``k``)."""
    t = tensor
    shapes = [
        (layers, (hidden + 2 * kv_width) / t, hidden),
        (layers, hidden, hidden / t),
        (layers, mlp_width / t, hidden),
        (layers, hidden, mlp_width / t),
    ]
    if vocab:
        shapes.append((1, vocab / t, hidden))
    return tuple((c, float(round(n)), float(round(k))) for c, n, k in shapes if n >= 1 and k >= 1)


@lru_cache(maxsize=16384)
def gemm_rate(table: str, dtype: str, m: int, gemms: tuple[Gemm, ...], gradients: int) -> float:
    """FLOP/s the ``gemms`` over ``m`` rows reach by the measured table: the forward
    alone (``gradients`` 0, serving), with the input's gradient (1: a frozen base), or
    with the weight's too (2: training). Each backward GEMM is timed as the forward's
    with the transposed shape: the input's gradient ``dX = dY·Wᵀ`` as ``m x k`` over
    ``n``, the weight's ``dW = Xᵀ·dY`` as ``n x k`` over ``m`` rows: the same work."""
    if dtype not in kernel_tables()[table].gemm:
        dtype = "bf16"
    flops = seconds = 0.0
    for count, n, k in gemms:
        once = gemm_seconds(table, dtype, m, n, k)
        if gradients >= 1:
            once += gemm_seconds(table, dtype, m, k, n)
        if gradients >= 2:
            once += gemm_seconds(table, dtype, n, k, m)
        seconds += count * once
        flops += count * 2 * (1 + gradients) * m * n * k
    return flops / seconds


def kernels_used(rates: "RatesLike", timed_by_shape: bool) -> tuple[KernelSource, str | None]:
    """What an answer says timed its GEMMs and attention, and the table's provenance id:
    ``measured`` where the GPU's rates carry a table and the model's shapes are known
    (``timed_by_shape``), else ``roofline``."""
    table = rates.kernel_table
    if rates.kernel_source == "measured" and table is not None and timed_by_shape:
        return "measured", kernel_tables()[table].id
    return "roofline", None
