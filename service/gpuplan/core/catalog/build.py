"""From catalog documents (parsed TOML/YAML/JSON) to a validated :class:`Catalog`.

A document has two tables: ``sources`` (id → title, url, kind) and ``gpu`` (a list of
entries). An entry is a :class:`GpuSpec` written without what can be derived:
``interconnect.pcie`` gives only ``generation`` and ``lanes``, ``gpu_link`` only the
bidirectional figure, and ``sources`` maps each field to source *ids*. The built-in
data is the first document; a user's catalog file comes after it, and there an entry
whose id already exists overrides the fields it names (mappings merge, other values
and price quotes replace), while a new id adds a SKU. Every error names the document, the entry and
the field. The providers' price tables (:mod:`gpuplan.core.catalog.prices`) are read after
the entries and attach each GPU's quotes to its ``price.cloud``; an entry never sets
``price.cloud`` itself (a negotiated price is ``price.cloud_on_demand``).
"""

import copy
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from gpuplan.core.catalog.catalog import Catalog, DuplicateName
from gpuplan.core.catalog.model import PRECISIONS, GpuSpec, Source
from gpuplan.core.catalog.prices import PriceTableError, attach, read_price_tables
from gpuplan.core.errors import DataError, field_error

# Fields whose value must name a source. peak_flops may be covered as a whole or per
# precision ("peak_flops.fp8"); a price carries its own source and date.
SOURCED_FIELDS = (
    "memory_bytes",
    "usable_memory_bytes",
    "memory_type",
    "memory_bandwidth_bytes_per_s",
    "peak_flops",
    "tdp_watts",
    "interconnect",
    "mig",
    "launch_year",
)
# Identifiers may cite where they were read; numbers must.
OPTIONALLY_SOURCED = ("nvml_names", "pci_device_ids", "aliases")
_DERIVED = {
    "pcie": ("per_direction_bytes_per_s", "bidirectional_bytes_per_s"),
    "gpu_link": ("per_direction_bytes_per_s",),
}
# PCIe payload bytes/s per lane: transfer rate x line-code efficiency / 8 bits.
# Gen1-2 use 8b/10b, Gen3-5 128b/130b; Gen6 (PAM4, FLIT mode) is quoted at 64 GT/s
# with 242/256 FLIT efficiency.
_PCIE_LANE_BYTES_PER_S = {
    1: 2.5e9 * 8 / 10 / 8,
    2: 5e9 * 8 / 10 / 8,
    3: 8e9 * 128 / 130 / 8,
    4: 16e9 * 128 / 130 / 8,
    5: 32e9 * 128 / 130 / 8,
    6: 64e9 * 242 / 256 / 8,
}


class CatalogError(DataError):
    """A catalog document is invalid; the message names document, entry and field."""


def build_catalog(
    documents: Iterable[tuple[str, Any]], price_tables: Iterable[tuple[str, str, Any]] = ()
) -> Catalog:
    """Validate and merge ``(origin, document)`` pairs, the built-in data first, and
    attach the ``(origin, provider, table)`` price tables' quotes to the GPUs."""
    sources: dict[str, Source] = {}
    entries: dict[str, dict[str, Any]] = {}
    origins: dict[str, str] = {}
    for origin, document in documents:
        for source in _sources(origin, document):
            sources[source.id] = source
        for raw in _entries(origin, document):
            gpu_id = raw["id"]
            if gpu_id in entries:
                entries[gpu_id] = _merge(entries[gpu_id], raw)
            else:
                entries[gpu_id] = copy.deepcopy(raw)
            origins[gpu_id] = origin
    specs = [_spec(origins[gpu_id], raw, sources) for gpu_id, raw in entries.items()]
    try:
        tables = read_price_tables(price_tables, entries)
    except PriceTableError as exc:
        raise CatalogError(str(exc)) from None
    specs = [attach(spec, tables) for spec in specs]
    try:
        return Catalog(specs, tables.providers)
    except DuplicateName as exc:
        where = " and ".join(dict.fromkeys(origins[i] for i in exc.ids))
        raise CatalogError(f"{where}: {exc}") from None


def _sources(origin: str, document: Any) -> list[Source]:
    if not isinstance(document, Mapping):
        raise CatalogError(f"{origin}: a catalog document is a mapping with `sources` and `gpu`")
    unknown = set(document) - {"sources", "gpu"}
    if unknown:
        raise CatalogError(
            f"{origin}: unknown top-level key(s) {sorted(unknown)}; expected `sources`, `gpu`"
        )
    table = document.get("sources", {})
    if not isinstance(table, Mapping):
        raise CatalogError(f"{origin}: `sources` must map source ids to {{title, url, kind}}")
    out = []
    for source_id, body in table.items():
        if not isinstance(body, Mapping):
            raise CatalogError(f"{origin}: source `{source_id}` must be a table")
        try:
            out.append(msgspec.convert({**body, "id": source_id}, Source))
        except msgspec.ValidationError as exc:
            raise CatalogError(f"{origin}: source `{source_id}`: {_where(exc)}") from None
    return out


def _entries(origin: str, document: Mapping[str, Any]) -> list[dict[str, Any]]:
    entries = document.get("gpu", [])
    if not isinstance(entries, list):
        raise CatalogError(f"{origin}: `gpu` must be a list of entries ([[gpu]] in TOML)")
    seen: set[str] = set()
    for index, raw in enumerate(entries):
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            raise CatalogError(f"{origin}: gpu entry #{index + 1} needs a string `id`")
        if raw["id"] in seen:
            raise CatalogError(f"{origin}: entry `{raw['id']}` appears twice")
        seen.add(raw["id"])
    return entries


# A price quote is one fact (amount, date, source): an override replaces it whole, so a
# new amount can never inherit the old quote's date.
_ATOMIC = frozenset({"cloud_on_demand", "purchase"})


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` into a copy of ``base``: mappings merge, the rest replaces."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if key not in _ATOMIC and isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _spec(origin: str, raw: dict[str, Any], sources: Mapping[str, Source]) -> GpuSpec:
    where = f"{origin}: entry `{raw['id']}`"
    entry = copy.deepcopy(raw)
    if isinstance(entry.get("price"), dict) and "cloud" in entry["price"]:
        raise CatalogError(
            f"{where}: $.price.cloud comes from the providers' price tables; a negotiated "
            "price is [gpu.price.cloud_on_demand]"
        )
    _derive_links(where, entry)
    cited = entry.get("sources", {})
    if not isinstance(cited, Mapping):
        raise CatalogError(f"{where}: `sources` must map field names to lists of source ids")
    resolved: dict[str, list[Any]] = {}
    for field, ids in cited.items():
        id_list = [ids] if isinstance(ids, str) else ids
        if not isinstance(id_list, list) or not all(isinstance(i, str) for i in id_list):
            raise CatalogError(
                f"{where}: $.sources.{field}: expected a source id or a list of them"
            )
        missing = [i for i in id_list if i not in sources]
        if missing:
            raise CatalogError(f"{where}: $.sources.{field}: unknown source id(s) {missing}")
        resolved[field] = [msgspec.to_builtins(sources[i]) for i in id_list]
    entry["sources"] = resolved
    try:
        spec = msgspec.convert(entry, GpuSpec)
    except msgspec.ValidationError as exc:
        raise CatalogError(f"{where}: {_where(exc)}") from None
    _check_sources(where, spec)
    _check_consistency(where, spec)
    return spec


def _derive_links(where: str, entry: dict[str, Any]) -> None:
    interconnect = entry.get("interconnect")
    if not isinstance(interconnect, dict):
        return
    for part, derived in _DERIVED.items():
        link = interconnect.get(part)
        if not isinstance(link, dict):
            continue
        for key in derived:
            if key in link:
                raise CatalogError(
                    f"{where}: $.interconnect.{part}.{key} is derived; do not set it"
                )
        if part == "pcie":
            rate = _PCIE_LANE_BYTES_PER_S.get(link.get("generation"))  # type: ignore[arg-type]
            lanes = link.get("lanes")
            if rate is not None and isinstance(lanes, int):
                link["per_direction_bytes_per_s"] = round(rate * lanes)
                link["bidirectional_bytes_per_s"] = 2 * round(rate * lanes)
        else:
            total = link.get("bidirectional_bytes_per_s")
            if isinstance(total, int):
                link["per_direction_bytes_per_s"] = total // 2


def _check_sources(where: str, spec: GpuSpec) -> None:
    for field in SOURCED_FIELDS:
        if field == "peak_flops":
            uncovered = [
                p
                for p in spec.peak_flops
                if "peak_flops" not in spec.sources and f"peak_flops.{p}" not in spec.sources
            ]
            if uncovered:
                raise CatalogError(
                    f"{where}: peak_flops.{uncovered[0]} has no source (add it to `sources`)"
                )
        elif field not in spec.sources:
            raise CatalogError(f"{where}: {field} has no source (add it to `sources`)")
    known = set(SOURCED_FIELDS) | set(OPTIONALLY_SOURCED) | {f"peak_flops.{p}" for p in PRECISIONS}
    for field, cited in spec.sources.items():
        if field not in known:
            raise CatalogError(f"{where}: $.sources.{field}: not a sourced field")
        # A value only derived or recalled, never read in a source, must say so.
        weak = all(source.kind in ("derived", "recalled") for source in cited)
        if weak and not _is_unverified(spec, field):
            raise CatalogError(
                f"{where}: {field} cites only derived or recalled sources; list it in `unverified`"
            )


def _is_unverified(spec: GpuSpec, field: str) -> bool:
    return any(field == u or field.startswith(u + ".") for u in spec.unverified)


def _check_consistency(where: str, spec: GpuSpec) -> None:
    """Physical rules a type cannot express."""
    if spec.usable_memory_bytes > spec.memory_bytes:
        raise CatalogError(f"{where}: usable_memory_bytes exceeds memory_bytes")
    flops = spec.peak_flops
    if "fp8" in flops and "bf16" in flops and flops["fp8"] < flops["bf16"]:
        raise CatalogError(f"{where}: peak_flops.fp8 is below peak_flops.bf16")
    if spec.mig.supported != (spec.mig.max_instances > 0):
        raise CatalogError(f"{where}: mig.max_instances must be > 0 exactly when MIG is supported")
    for field in spec.unverified:
        head = field.split(".")[0]
        if head not in GpuSpec.__struct_fields__:
            raise CatalogError(f"{where}: unverified names `{field}`, which is not a field")


def _where(exc: msgspec.ValidationError) -> str:
    return "{}: {}".format(*field_error(exc))
