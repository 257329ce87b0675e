"""``GET /v1/mig/profiles``: a GPU's MIG profiles with placements, usable memory and sources."""

from collections.abc import Sequence

from gpuplan.core.catalog import Catalog
from gpuplan.core.mig.geometry import geometry
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.schema import Placement, ProfileInfo, ProfilesQuery, ProfilesResponse
from gpuplan.core.mig.tables import resolve, resource_name


def profiles(
    query: ProfilesQuery, catalog: Catalog, tables: Sequence[MigGpu] | None = None
) -> ProfilesResponse:
    spec, table = resolve(
        catalog, builtin_tables() if tables is None else tables, query.gpu, location="query"
    )
    return ProfilesResponse(
        gpu=spec.id,
        name=spec.name,
        table=table.id,
        memory_slices=table.memory_slices,
        compute_slices=table.compute_slices,
        max_instances=table.max_instances,
        valid_layouts=len(geometry(table).layouts),
        unverified=table.unverified,
        profiles=[
            ProfileInfo(
                name=p.name,
                profile_id=p.profile_id,
                compute_slices=p.compute_slices,
                memory_slices=p.memory_slices,
                memory_bytes=p.memory_bytes,
                max_count=p.max_count,
                placements=[Placement(s, p.memory_slices) for s in p.placements],
                engines=p.engines,
                resource=resource_name(p.name),
                unverified=list(p.unverified),
                sources=p.sources,
            )
            for p in table.profiles
        ],
        sources=table.sources,
    )
