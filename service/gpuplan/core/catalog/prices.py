"""Cloud price tables: one per provider, each price dated and sourced, none mixed.

A GPU's cloud price depends on who rents it out: the same H100 SXM costs $3.99 an hour
at one provider and $12.29 at another. Comparing GPUs on prices taken from different
providers (an H100 at a hyperscaler's list price, an H200 at a neocloud's) favours
whichever GPU happened to be priced at the cheaper one. So prices are not a property of
a GPU but a table per provider (``data/prices/<provider>.toml``), and a comparison
states which tables it uses (:func:`lowest`).

A table holds the provider's name, region and how its per-GPU figures were read, its
sources, and ``[[price]]`` rows: the GPU (a catalog id), the kind (``on_demand``,
``spot``, ``reserved`` with its ``term``), the instance priced with its GPU count, the
price (per GPU, or per instance, which the loader divides by the GPUs), the day it was
read (``as_of``) and the source it was read in. A GPU the provider does not list has no
row: nothing is interpolated. Every error names the table, the row and the field.
"""

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec

from gpuplan.core.catalog.model import (
    PROVIDERS,
    CloudQuote,
    GpuSpec,
    PriceKind,
    PriceProvider,
    ProviderId,
    Source,
)
from gpuplan.core.errors import DataError, field_error

DEFAULT_PROVIDERS: tuple[ProviderId, ...] = ("aws",)
"""The default price basis: AWS on-demand list prices. One provider, so every GPU is
priced the same way; AWS because its list prices come from its price API, change
rarely (a plan file's cost target does not drift with a neocloud's weekly repricing),
and cover the most data-centre GPUs of the catalog that are commonly rented (H100,
H200, B200, A100 40 and 80 GB, L40S, L4, A10G, T4, V100, RTX PRO 6000)."""

_PRICE_KEYS = frozenset({"provider", "sources", "price"})


class PriceTableError(DataError):
    """A price table is invalid; the message names the table, the row and the field."""


class PriceTables(NamedTuple):
    """Every table read: the providers, and each GPU's quotes (by provider, then kind)."""

    providers: tuple[PriceProvider, ...]
    quotes: dict[str, list[CloudQuote]]


def read_price_tables(
    documents: Iterable[tuple[str, str, Any]], gpu_ids: Iterable[str]
) -> PriceTables:
    """Validate ``(origin, provider id, document)`` triples against the catalog's GPU ids."""
    known = set(gpu_ids)
    providers: list[PriceProvider] = []
    quotes: dict[str, list[CloudQuote]] = {}
    for origin, provider_id, document in documents:
        provider, rows = _table(origin, provider_id, document, known)
        if any(p.id == provider.id for p in providers):
            raise PriceTableError(f"{origin}: a second table for provider `{provider.id}`")
        providers.append(provider)
        for quote in rows:
            quotes.setdefault(quote.gpu_id, []).append(quote.quote)
    order = {p: i for i, p in enumerate(PROVIDERS)}
    kinds = {"on_demand": 0, "reserved": 1, "spot": 2}
    for listed in quotes.values():
        listed.sort(key=lambda q: (order[q.provider], kinds[q.kind]))
    providers.sort(key=lambda p: order[p.id])
    return PriceTables(tuple(providers), quotes)


class _Row(NamedTuple):
    gpu_id: str
    quote: CloudQuote


def _table(
    origin: str, provider_id: str, document: Any, known: set[str]
) -> tuple[PriceProvider, list[_Row]]:
    if provider_id not in PROVIDERS:
        raise PriceTableError(
            f"{origin}: `{provider_id}` is not a provider the schema knows ({', '.join(PROVIDERS)}); "
            "add it to ProviderId in core/catalog/model.py"
        )
    if not isinstance(document, Mapping):
        raise PriceTableError(
            f"{origin}: a price table is a mapping with `provider`, `sources`, `price`"
        )
    unknown = set(document) - _PRICE_KEYS
    if unknown:
        raise PriceTableError(
            f"{origin}: unknown top-level key(s) {sorted(unknown)}; expected `provider`, `sources`, `price`"
        )
    try:
        provider = msgspec.convert(
            {**document.get("provider", {}), "id": provider_id}, PriceProvider
        )
    except (msgspec.ValidationError, TypeError) as exc:
        reason = (
            "{}: {}".format(*field_error(exc))
            if isinstance(exc, msgspec.ValidationError)
            else str(exc)
        )
        raise PriceTableError(f"{origin}: $.provider: {reason}") from None
    sources = _sources(origin, document.get("sources", {}))
    rows = document.get("price", [])
    if not isinstance(rows, list):
        raise PriceTableError(f"{origin}: `price` must be a list of rows ([[price]] in TOML)")
    out: list[_Row] = []
    seen: set[tuple[str, str]] = set()
    for index, raw in enumerate(rows):
        row = _row(f"{origin}: price #{index + 1}", provider.id, raw, sources, known)
        key = (row.gpu_id, row.quote.kind)
        if key in seen:
            raise PriceTableError(
                f"{origin}: price #{index + 1}: a second `{row.quote.kind}` price for `{row.gpu_id}`"
            )
        seen.add(key)
        out.append(row)
    return provider, out


def _sources(origin: str, table: Any) -> dict[str, Source]:
    if not isinstance(table, Mapping):
        raise PriceTableError(f"{origin}: `sources` must map source ids to {{title, url, kind}}")
    out = {}
    for source_id, body in table.items():
        if not isinstance(body, Mapping):
            raise PriceTableError(f"{origin}: source `{source_id}` must be a table")
        try:
            out[source_id] = msgspec.convert({**body, "id": source_id}, Source)
        except msgspec.ValidationError as exc:
            raise PriceTableError(
                "{}: source `{}`: {}: {}".format(origin, source_id, *field_error(exc))
            ) from None
    return out


def _row(
    where: str,
    provider: ProviderId,
    raw: Any,
    sources: Mapping[str, Source],
    known: set[str],
) -> _Row:
    if not isinstance(raw, dict):
        raise PriceTableError(f"{where}: a price row is a table")
    entry = copy.deepcopy(raw)
    gpu_id = entry.pop("gpu", None)
    if not isinstance(gpu_id, str) or gpu_id not in known:
        raise PriceTableError(f"{where}: $.gpu: {gpu_id!r} is not a catalog id")
    where = f"{where} (`{gpu_id}`)"
    source_id = entry.get("source")
    if source_id is None:
        raise PriceTableError(f"{where}: $.source: every price names the source it was read in")
    if not isinstance(source_id, str) or source_id not in sources:
        raise PriceTableError(f"{where}: $.source: unknown source id {source_id!r}")
    entry["source"] = msgspec.to_builtins(sources[source_id])
    per_instance = entry.get("usd_per_instance_hour")
    if per_instance is not None and "usd_per_gpu_hour" in entry:
        raise PriceTableError(
            f"{where}: give usd_per_gpu_hour or usd_per_instance_hour, not both "
            "(the per-GPU price is the instance's divided by its gpus)"
        )
    if isinstance(per_instance, int | float) and not isinstance(per_instance, bool):
        gpus = entry.get("gpus", 1)
        if isinstance(gpus, int) and gpus > 0:
            entry["usd_per_gpu_hour"] = round(per_instance / gpus, 6)
    elif "usd_per_gpu_hour" not in entry:
        raise PriceTableError(f"{where}: $.usd_per_gpu_hour: no price (or usd_per_instance_hour)")
    try:
        quote = msgspec.convert({**entry, "provider": provider}, CloudQuote)
    except msgspec.ValidationError as exc:
        raise PriceTableError("{}: {}: {}".format(where, *field_error(exc))) from None
    if (quote.kind == "reserved") != (quote.term is not None):
        raise PriceTableError(f"{where}: $.term: a reserved price names its term, and only it")
    return _Row(gpu_id, quote)


def attach(gpu: GpuSpec, tables: PriceTables) -> GpuSpec:
    """``gpu`` with every table's quotes of it in ``price.cloud``."""
    listed = tables.quotes.get(gpu.id, [])
    if not listed:
        return gpu
    return msgspec.structs.replace(
        gpu, price=msgspec.structs.replace(gpu.price, cloud=list(listed))
    )


def lowest(gpu: GpuSpec, providers: Sequence[ProviderId], kind: PriceKind) -> CloudQuote | None:
    """The lowest ``kind`` price of ``gpu`` among ``providers``' tables; a tie goes to
    the provider named first. None when none of them lists the GPU."""
    rank = {p: i for i, p in enumerate(providers)}
    listed = [q for q in gpu.price.cloud if q.kind == kind and q.provider in rank]
    if not listed:
        return None
    return min(listed, key=lambda q: (q.usd_per_gpu_hour, rank[q.provider]))
