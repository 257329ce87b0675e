"""A placement query, checked: what the workload needs and where it may go.

The query states a workload as a MIG plan does (a ``profile``, or ``memory_gib`` and
``compute_slices``) with filters (``node``, ``gpu``) and ``whole_gpu``. Rules across
fields and the names it gives (a GPU model, a profile) are checked here, against the
catalog and the MIG tables alone, so an adapter refuses a bad query before it reads the
fleet. A profile is resolved per MIG table: ``1g.10gb`` is a profile of A100 80GB and of
H100 80GB, each with its own memory and placements.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpuplan.core.catalog import Catalog, UnknownGpu
from gpuplan.core.errors import InvalidRequest, Location
from gpuplan.core.mig.demand import is_plain
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.schema import PlacementQuery
from gpuplan.core.mig.tables import find_profile, profile_index, resolve
from gpuplan.core.names import closest, did_you_mean

GiB = 2**30


@dataclass(frozen=True)
class Demand:
    """A checked placement query: what the workload needs, and where it may go."""

    memory_bytes: int
    compute_slices: int
    profile: str | None
    """The profile asked for, as the MIG tables name it."""
    ref: str | None
    """The profile as the query spelled it (each table resolves it its own way)."""
    whole_gpu: bool
    model: str | None
    """Catalog id of the ``gpu`` filter."""

    def eligible(self, table: MigGpu) -> tuple[int, ...]:
        """Indices of ``table``'s profiles a new instance of the workload may have."""
        if self.ref is not None:
            found = find_profile(table, self.ref)
            return () if found is None else (found,)
        return tuple(
            k
            for k, p in enumerate(table.profiles)
            if is_plain(p.name)
            and p.memory_bytes >= self.memory_bytes
            and p.compute_slices >= self.compute_slices
        )


def check_placement(
    query: PlacementQuery,
    catalog: Catalog,
    tables: Sequence[MigGpu] | None = None,
    location: Location = "body",
) -> Demand:
    """The query as a :class:`Demand`; raises :class:`InvalidRequest` naming each bad field.

    It reads no fleet, so an adapter calls it first: a bad query is refused even where
    the fleet cannot be read.
    """
    tables = builtin_tables() if tables is None else tables
    errors: list[tuple[str, str]] = []
    if query.profile is None and query.memory_gib is None:
        errors.append(
            ("$.memory_gib", "give `memory_gib` (with optional `compute_slices`) or `profile`")
        )
    if query.profile is not None and query.memory_gib is not None:
        errors.append(("$.profile", "give either `profile` or `memory_gib`, not both"))
    if query.profile is not None and query.compute_slices is not None:
        errors.append(("$.compute_slices", "only with `memory_gib`; a profile fixes its compute"))
    if query.profile is not None and query.whole_gpu:
        errors.append(("$.whole_gpu", "only with `memory_gib`; a profile is a MIG instance"))
    if errors:
        raise InvalidRequest(errors, location=location)
    try:
        model, table = _model(query, catalog, tables)
        profile = None if query.profile is None else _profile(query.profile, table, tables)
    except InvalidRequest as exc:
        exc.location = location
        raise
    if query.profile is not None:
        assert profile is not None
        compute = int(profile.split("g.", 1)[0])
        memory = 0
    else:
        assert query.memory_gib is not None
        compute = query.compute_slices or 1
        memory = math.ceil(query.memory_gib * GiB)
    return Demand(
        memory_bytes=memory,
        compute_slices=compute,
        profile=profile,
        ref=query.profile,
        whole_gpu=query.whole_gpu,
        model=model,
    )


def _model(
    query: PlacementQuery, catalog: Catalog, tables: Sequence[MigGpu]
) -> tuple[str | None, MigGpu | None]:
    if query.gpu is None:
        return None, None
    if not query.whole_gpu:
        spec, table = resolve(catalog, tables, query.gpu, path="$.gpu")
        return spec.id, table
    try:
        spec = catalog.get(query.gpu)
    except UnknownGpu as exc:
        raise MigInputError("$.gpu", exc.reason, "validation", exc.suggestions) from None
    return spec.id, next((t for t in tables if spec.id in t.gpus), None)


def _profile(ref: str, table: MigGpu | None, tables: Sequence[MigGpu]) -> str:
    if table is not None:
        return table.profiles[profile_index(table, ref, "$.profile")].name
    for t in tables:
        found = find_profile(t, ref)
        if found is not None:
            return t.profiles[found].name
    names = sorted({p.name for t in tables for p in t.profiles})
    close = closest(ref.strip().lower(), ((n, n) for n in names))
    raise MigInputError(
        "$.profile",
        f"no MIG table has a profile `{ref}`{did_you_mean(close)}",
        "unknown-profile",
        close,
    )
