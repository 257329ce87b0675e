"""Load and validate the built-in MIG tables (data/*.toml).

Every rule a planner depends on is checked here, once, so that the placement and
packing code can trust the tables: names agree with slice counts, placements fit in
the GPU, a full-GPU profile exists, every memory figure and placement cites a source,
and a value that only a derived source gives is marked unverified.
"""

import re
import tomllib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

import msgspec

from gpuplan.core.catalog.model import Source
from gpuplan.core.errors import DataError
from gpuplan.core.mig.model import MigGpu, MigProfile

DATA_PACKAGE = "gpuplan.core.mig.data"
_SOURCED = ("memory_bytes", "placements")


class MigDataError(DataError):
    """The MIG data is invalid; the message names the table, profile and field."""


def build_tables(documents: list[tuple[str, Any]]) -> tuple[MigGpu, ...]:
    """Validate ``(origin, document)`` pairs: sources first, then ``[[table]]`` entries."""
    sources: dict[str, Source] = {}
    raw_tables: list[tuple[str, dict[str, Any]]] = []
    for origin, document in documents:
        for source_id, body in document.get("sources", {}).items():
            try:
                sources[source_id] = msgspec.convert({**body, "id": source_id}, Source)
            except msgspec.ValidationError as exc:
                raise MigDataError(f"{origin}: source `{source_id}`: {exc}") from None
        raw_tables.extend((origin, t) for t in document.get("table", []))
    tables = [_table(origin, raw, sources) for origin, raw in raw_tables]
    seen: dict[str, str] = {}
    for table in tables:
        for gpu in table.gpus:
            if gpu in seen:
                raise MigDataError(f"GPU `{gpu}` is in tables `{seen[gpu]}` and `{table.id}`")
            seen[gpu] = table.id
    return tuple(tables)


def _resolve(where: str, ids: Any, sources: Mapping[str, Source]) -> list[dict[str, Any]]:
    if not isinstance(ids, list) or not ids:
        raise MigDataError(f"{where}: expected a non-empty list of source ids")
    missing = [i for i in ids if i not in sources]
    if missing:
        raise MigDataError(f"{where}: unknown source id(s) {missing}")
    return [msgspec.to_builtins(sources[i]) for i in ids]


def _table(origin: str, raw: dict[str, Any], sources: Mapping[str, Source]) -> MigGpu:
    where = f"{origin}: table `{raw.get('id')}`"
    entry = dict(raw)
    entry["sources"] = _resolve(f"{where}: sources", raw.get("sources"), sources)
    profiles = []
    for body in raw.get("profile", []):
        profile = dict(body)
        pwhere = f"{where}: profile `{body.get('name')}`"
        profile["sources"] = {
            field: _resolve(f"{pwhere}: sources.{field}", ids, sources)
            for field, ids in body.get("sources", {}).items()
        }
        profiles.append(profile)
    entry["profiles"] = profiles
    entry.pop("profile", None)
    try:
        table = msgspec.convert(entry, MigGpu)
    except msgspec.ValidationError as exc:
        raise MigDataError(f"{where}: {exc}") from None
    _check(where, table)
    return table


def _check(where: str, table: MigGpu) -> None:
    names = [p.name for p in table.profiles]
    if len(set(names)) != len(names):
        raise MigDataError(f"{where}: a profile name appears twice")
    full = [
        p
        for p in table.profiles
        if p.memory_slices == table.memory_slices and p.compute_slices == table.compute_slices
    ]
    if not full:
        raise MigDataError(f"{where}: no full-GPU profile")
    for p in table.profiles:
        _check_profile(f"{where}: profile `{p.name}`", table, p)
    for p in full:
        if p.memory_bytes < max(q.memory_bytes for q in table.profiles):
            raise MigDataError(f"{where}: `{p.name}` has less memory than a smaller profile")


def _check_profile(pwhere: str, table: MigGpu, p: MigProfile) -> None:
    match = re.match(r"^(\d)g\.", p.name)
    assert match is not None  # the Struct's pattern guarantees it
    if int(match[1]) != p.compute_slices:
        raise MigDataError(
            f"{pwhere}: the name says {match[1]}g but compute_slices is {p.compute_slices}"
        )
    if p.compute_slices > table.compute_slices or p.memory_slices > table.memory_slices:
        raise MigDataError(f"{pwhere}: larger than the GPU")
    if not p.placements or sorted(set(p.placements)) != p.placements:
        raise MigDataError(f"{pwhere}: placements must be a sorted list of distinct slots")
    if p.placements[-1] + p.memory_slices > table.memory_slices:
        raise MigDataError(f"{pwhere}: placement {p.placements[-1]} runs past the last slot")
    if p.max_count > table.max_instances:
        raise MigDataError(f"{pwhere}: max_count exceeds the GPU's max_instances")
    _check_sources(pwhere, p)
    if p.engines is None and "engines" not in p.unverified:
        raise MigDataError(f"{pwhere}: engines are unknown; list `engines` in `unverified`")


def _check_sources(pwhere: str, p: MigProfile) -> None:
    for field in _SOURCED:
        cited = p.sources.get(field)
        if not cited:
            raise MigDataError(f"{pwhere}: {field} has no source")
        weak = all(s.kind in ("derived", "recalled") for s in cited)
        if weak and field not in p.unverified:
            raise MigDataError(
                f"{pwhere}: {field} cites only derived sources; list it in `unverified`"
            )


def builtin_documents() -> list[tuple[str, Any]]:
    files = sorted(
        (f for f in resources.files(DATA_PACKAGE).iterdir() if f.name.endswith(".toml")),
        key=lambda f: (f.name != "sources.toml", f.name),
    )
    return [
        (f"gpuplan mig data {f.name}", tomllib.loads(f.read_text(encoding="utf-8"))) for f in files
    ]


@cache
def builtin_tables() -> tuple[MigGpu, ...]:
    """The shipped MIG tables (cached: they never change in a process)."""
    return build_tables(builtin_documents())
