"""Residual tables from residuals: what ``bench/`` runs to write the data files.

Kept in the core beside the code that reads the tables, so the groups are formed and the
spreads computed by one rule wherever a table is built (the speed and the memory
harnesses, and their honest checks of coverage, which rebuild a table without a source).
"""

import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence

from gpuplan.core.record import Record
from gpuplan.core.uncertainty.model import ResidualGroup, ResidualTable
from gpuplan.core.uncertainty.spread import semi_deviations


class Residual(Record):
    """One case's residual: its source, its size in GPUs, its regimes, log(pred/measured)."""

    source: str
    gpus: int
    regime: dict[str, str]
    log_error: float


def _group(axis: str, name: str, errors: list[float]) -> ResidualGroup:
    below, above = semi_deviations(errors)
    return ResidualGroup(
        axis=axis,
        name=name,
        runs=len(errors),
        mean_log_error=statistics.fmean(errors),
        sd_log_error=statistics.stdev(errors) if len(errors) > 1 else 0.0,
        sd_below_log_error=below,
        sd_above_log_error=above,
    )


def build_table(
    residuals: Sequence[Residual],
    axes: Sequence[str],
    *,
    measure: str,
    written_by: str,
    method: str,
) -> ResidualTable:
    """The table of ``residuals``: one group per regime of each of ``axes``."""
    errors = [r.log_error for r in residuals]
    groups = []
    for axis in axes:
        named: dict[str, list[float]] = defaultdict(list)
        for r in residuals:
            named[r.regime[axis]].append(r.log_error)
        groups += [_group(axis, name, es) for name, es in sorted(named.items())]
    pooled = _group("all", "all", errors)
    return ResidualTable(
        measure=measure,
        written_by=written_by,
        method=method,
        runs=len(residuals),
        sources=len({r.source for r in residuals}),
        max_gpus=max(r.gpus for r in residuals),
        mean_log_error=pooled.mean_log_error,
        sd_log_error=pooled.sd_log_error,
        sd_below_log_error=pooled.sd_below_log_error,
        sd_above_log_error=pooled.sd_above_log_error,
        groups=groups,
    )


def toml_line(name: str, value: object) -> str:
    """One ``name = value`` line of the data files the bench scripts write (floats to six
    places, so a rerun on the same inputs writes the same bytes)."""
    if isinstance(value, str):
        return f'{name} = "{value}"'
    if isinstance(value, float):
        return f"{name} = {value:.6f}"
    return f"{name} = {value}"


def tables_toml(tables: Sequence[ResidualTable], header: Sequence[str]) -> str:
    """The tables as the TOML the core reads (``[[table]]``, ``[[table.groups]]``), under
    ``header``'s comment lines."""
    lines = [f"# {h}" if h else "#" for h in header]
    for t in tables:
        fields: Mapping[str, object] = {
            f: getattr(t, f) for f in t.__struct_fields__ if f != "groups"
        }
        lines += ["", "[[table]]", *(toml_line(k, v) for k, v in fields.items())]
        for g in t.groups:
            lines += ["", "[[table.groups]]"]
            lines += [toml_line(f, getattr(g, f)) for f in g.__struct_fields__]
    return "\n".join(lines) + "\n"
