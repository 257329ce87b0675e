"""FlashAttention-2's measured training rates (data/flash_attention.toml).

A measured prefill table (:mod:`gpuplan.core.perf.kernels`) times the attention a serving
engine runs: TensorRT-LLM's kernels, or cuDNN's. A training job that says
``attention: flash`` runs FlashAttention-2 instead (the ``flash-attn`` 2.x package, or
PyTorch SDPA's flash backend, which SDPA picks on Hopper before cuDNN's until torch
2.11), and on Hopper that kernel is much slower than the table's: its sm80 code does not
use Hopper's asynchronous tensor cores. These rates are the measured ones, forward and
backward apart, by sequence length.
"""

import math
import tomllib
from functools import cache
from importlib import resources
from itertools import pairwise

import msgspec


class FlashRate(msgspec.Struct, kw_only=True, frozen=True):
    keys: int
    forward_tflops: float
    backward_tflops: float


class FlashTable(msgspec.Struct, kw_only=True, frozen=True):
    kernel: str
    generation: str
    """The :class:`gpuplan.core.perf.efficiency.Generation` name whose GPUs it times."""

    dtype: str
    causal: bool
    head_dim: int
    flops: str
    """How the rates count FLOPs."""

    backward_flops_over_forward: float
    """The backward's FLOPs per forward FLOP in that count."""

    source: str
    rows: tuple[FlashRate, ...]
    """By ``keys``, ascending."""

    def rates(self, keys: float) -> tuple[float, float]:
        """(forward, backward) TFLOP/s at ``keys`` keys a sequence: log-linear between
        rows, clamped to the first and last."""
        rows = self.rows
        if keys <= rows[0].keys:
            return rows[0].forward_tflops, rows[0].backward_tflops
        if keys >= rows[-1].keys:
            return rows[-1].forward_tflops, rows[-1].backward_tflops
        i = max(j for j, row in enumerate(rows) if row.keys <= keys)
        lo, hi = rows[i], rows[i + 1]
        x = math.log(keys / lo.keys) / math.log(hi.keys / lo.keys)
        return (
            lo.forward_tflops + x * (hi.forward_tflops - lo.forward_tflops),
            lo.backward_tflops + x * (hi.backward_tflops - lo.backward_tflops),
        )


class _Data(msgspec.Struct, kw_only=True, frozen=True):
    table: tuple[FlashTable, ...]


def parse(text: str) -> dict[str, FlashTable]:
    """The tables of ``text`` by generation, validated: rows ascending by keys, rates
    positive, one table a generation."""
    data = msgspec.convert(tomllib.loads(text), _Data)
    out: dict[str, FlashTable] = {}
    for t in data.table:
        if t.generation in out:
            raise ValueError(f"flash_attention.toml: two tables for {t.generation}")
        if not t.rows:
            raise ValueError(f"flash_attention.toml: {t.generation} has no rows")
        keys = [r.keys for r in t.rows]
        if any(b <= a for a, b in pairwise(keys)) or keys[0] <= 0:
            raise ValueError(f"flash_attention.toml: {t.generation} rows must ascend by keys")
        if t.backward_flops_over_forward <= 0:
            raise ValueError(
                f"flash_attention.toml: {t.generation} needs a positive backward count"
            )
        if any(r.forward_tflops <= 0 or r.backward_tflops <= 0 for r in t.rows):
            raise ValueError(f"flash_attention.toml: {t.generation} rates must be positive")
        out[t.generation] = t
    return out


@cache
def flash2_tables() -> dict[str, FlashTable]:
    """The shipped FlashAttention-2 tables by generation, validated at first use."""
    text = (
        resources.files("gpuplan.core.perf.data")
        .joinpath("flash_attention.toml")
        .read_text("utf-8")
    )
    return parse(text)
