"""From a catalog name to its MIG table, and from any spelling of a profile to its index."""

import re
from collections.abc import Sequence
from typing import Literal

from gpuplan.core.catalog import Catalog, GpuSpec, UnknownGpu
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.names import closest, did_you_mean

_PREFIX = re.compile(r"^(nvidia\.com/mig-|mig[- ])", re.IGNORECASE)
# The device plugin turns `+` into `.`: 1g.10gb+me -> mig-1g.10gb.me
_RESOURCE_FORM = re.compile(r"^(\d+g\.\d+gb)\.(.+)$")


def resolve(
    catalog: Catalog,
    tables: Sequence[MigGpu],
    query: str,
    path: str = "$.gpu",
    location: Literal["body", "query"] = "body",
) -> tuple[GpuSpec, MigGpu]:
    """The catalog SKU ``query`` names (any lookup form) and its MIG table.

    Raises :class:`MigInputError` for an unknown name (with the closest ids) and for
    a GPU without MIG.
    """
    try:
        spec = catalog.get(query)
    except UnknownGpu as exc:
        # A name given in a request's input is a bad value there (422), as elsewhere
        # in the API; 404 is for a resource named by the URL path.
        raise MigInputError(
            path,
            exc.reason,
            "validation",
            exc.suggestions,
            location,
        ) from None
    for table in tables:
        if spec.id in table.gpus:
            return spec, table
    capable = sorted(g for t in tables for g in t.gpus)
    raise MigInputError(
        path,
        f"`{spec.id}` does not support MIG; MIG-capable GPUs: {', '.join(capable)}",
        "mig-unsupported",
        capable,
        location,
    )


def find_profile(table: MigGpu, ref: str) -> int | None:
    """Index of the profile ``ref`` names (nvidia-smi, mig-parted or Kubernetes form), or None."""
    names = [p.name for p in table.profiles]
    name = _PREFIX.sub("", ref.strip()).lower()
    if name in names:
        return names.index(name)
    match = _RESOURCE_FORM.match(name)
    if match and f"{match[1]}+{match[2]}" in names:
        return names.index(f"{match[1]}+{match[2]}")
    return None


def profile_index(table: MigGpu, ref: str, path: str) -> int:
    """Index of the profile ``ref`` names, in nvidia-smi, mig-parted or Kubernetes form."""
    found = find_profile(table, ref)
    if found is not None:
        return found
    names = [p.name for p in table.profiles]
    name = _PREFIX.sub("", ref.strip()).lower()
    close = closest(name, ((n, n) for n in names))
    raise MigInputError(
        path,
        f"no MIG profile `{ref}` on this GPU (table `{table.id}`){did_you_mean(close)} "
        f"(profiles: {', '.join(names)})",
        "unknown-profile",
        close,
    )


def resource_name(profile: str) -> str:
    """Kubernetes resource of a profile under the ``mixed`` strategy."""
    return "nvidia.com/mig-" + profile.replace("+", ".")
