"""``POST /v1/mig/validate``: is this set of GPU instances a valid layout, and how to create it.

Rules, in the order a reason is reported: each profile within its ``max_count``, the
GPU within ``max_instances``, compute slices and engine budget (one ``+me`` per GPU);
a given start among the profile's placements; no two given instances overlapping;
and some placement of the rest in the free slots. A valid layout also gets its
canonical placement and the creation order that makes the driver's first-fit
placement produce it (see :mod:`gpuplan.core.mig.geometry`).
"""

from collections.abc import Sequence

from gpuplan.core.catalog import Catalog
from gpuplan.core.mig.geometry import count_violations, creation_order, first_fit, geometry, place
from gpuplan.core.mig.load import builtin_tables
from gpuplan.core.mig.model import MigGpu
from gpuplan.core.mig.schema import LayoutProblem, PlacedInstance, ValidateRequest, ValidateResponse
from gpuplan.core.mig.tables import profile_index, resolve


def _kind(message: str) -> str:
    if message.startswith("too many `"):
        return "too-many-of-profile"
    if "GPU instances" in message:
        return "too-many-instances"
    if "compute slices" in message:
        return "compute"
    return "engines"


def validate(
    request: ValidateRequest, catalog: Catalog, tables: Sequence[MigGpu] | None = None
) -> ValidateResponse:
    spec, table = resolve(catalog, builtin_tables() if tables is None else tables, request.gpu)
    geo = geometry(table)
    indices = [
        profile_index(table, inst.profile, f"$.instances[{i}].profile")
        for i, inst in enumerate(request.instances)
    ]
    counts = [0] * len(table.profiles)
    for p in indices:
        counts[p] += 1
    reasons, fixed = _problems(table, request, indices, counts)
    key = tuple(counts)
    placement = order = None
    stranded = 0
    if not reasons:
        given = tuple((p, s) for _, p, s in fixed)
        explicit = place(table, key, given)
        if explicit is None:
            detail = (
                "no placement of these instances exists"
                if key not in geo.index
                else "the other instances do not fit in the slots the given starts leave free"
            )
            reasons.append(LayoutProblem("no-placement", detail, list(range(len(indices)))))
        else:
            canonical = creation_order(table, key)
            assert canonical is not None
            # The starts asked for (completed where some are missing), else the canonical.
            chosen = explicit if fixed else canonical[0]
            placement = [
                PlacedInstance(table.profiles[p].name, s, table.profiles[p].memory_slices)
                for p, s in chosen
            ]
            if chosen == canonical[0]:
                order = [table.profiles[p].name for p in canonical[1]]
            else:
                found = creation_order_for(table, chosen)
                order = None if found is None else [table.profiles[p].name for p in found]
            stranded = geo.stranded[geo.index[key]]
    warnings = []
    if not reasons and stranded:
        warnings.append(
            LayoutProblem(
                "stranded-compute",
                f"{stranded} compute slice(s) can never be used: no profile fits the free memory slots",
            )
        )
    used_profiles = {table.profiles[p].name for p in indices}
    return ValidateResponse(
        gpu=spec.id,
        valid=not reasons,
        reasons=reasons,
        warnings=warnings,
        placement=placement,
        creation_order=order,
        memory_slices_used=sum(table.profiles[p].memory_slices for p in indices),
        compute_slices_used=sum(table.profiles[p].compute_slices for p in indices),
        stranded_compute_slices=stranded,
        unverified=sorted(
            p.name for p in table.profiles if p.name in used_profiles and p.unverified
        ),
    )


def _problems(
    table: MigGpu, request: ValidateRequest, indices: list[int], counts: list[int]
) -> tuple[list[LayoutProblem], list[tuple[int, int, int]]]:
    """Reasons the layout is invalid before any search, and the GIs given a valid start."""
    reasons: list[LayoutProblem] = []
    for message in count_violations(table, counts):
        involved = [i for i, p in enumerate(indices) if f"`{table.profiles[p].name}`" in message]
        reasons.append(LayoutProblem(_kind(message), message, involved))  # type: ignore[arg-type]
    fixed: list[tuple[int, int, int]] = []  # (request index, profile, start)
    for i, (inst, p) in enumerate(zip(request.instances, indices, strict=True)):
        if inst.start is None:
            continue
        profile = table.profiles[p]
        if inst.start not in profile.placements:
            reasons.append(
                LayoutProblem(
                    "no-such-placement",
                    f"`{profile.name}` cannot start at slot {inst.start}; its starts are "
                    f"{', '.join(map(str, profile.placements))} (size {profile.memory_slices})",
                    [i],
                )
            )
        else:
            fixed.append((i, p, inst.start))
    for a in range(len(fixed)):
        for b in range(a + 1, len(fixed)):
            ia, pa, sa = fixed[a]
            ib, pb, sb = fixed[b]
            ea = sa + table.profiles[pa].memory_slices
            eb = sb + table.profiles[pb].memory_slices
            if sa < eb and sb < ea:
                reasons.append(
                    LayoutProblem(
                        "overlap",
                        f"`{table.profiles[pa].name}` at {sa}:{ea - sa} overlaps "
                        f"`{table.profiles[pb].name}` at {sb}:{eb - sb} (memory slots "
                        f"{max(sa, sb)}-{min(ea, eb) - 1})",
                        [ia, ib],
                    )
                )
    return reasons, fixed


def creation_order_for(table: MigGpu, placed: Sequence[tuple[int, int]]) -> list[int] | None:
    """An order whose first-fit placement is exactly ``placed``, or None.

    A GI lands at start s under first-fit iff every earlier start of its profile is
    blocked when it is created; trying orders with pruning finds one quickly.
    """
    items = sorted(placed, key=lambda ps: (-table.profiles[ps[0]].memory_slices, ps[1]))

    def walk(
        done: list[tuple[int, int]], rest: list[tuple[int, int]], occupied: int
    ) -> list[int] | None:
        if not rest:
            return [p for p, _ in done]
        tried = set()
        for i, (p, s) in enumerate(rest):
            if (p, s) in tried:
                continue
            tried.add((p, s))
            starts = first_fit(table, [p], occupied)
            if starts == [s]:
                mask = ((1 << table.profiles[p].memory_slices) - 1) << s
                found = walk([*done, (p, s)], rest[:i] + rest[i + 1 :], occupied | mask)
                if found is not None:
                    return found
        return None

    return walk([], items, 0)
