"""The MIG tables against the facts (shared/reference/mig.md, the User Guide r610, mig-parted's
default config and the captures in data/sources.toml), the catalog, and the loader's rules."""

import copy
from typing import Any, cast

import msgspec
import pytest
from bench.mig.mig_check import layouts as independent_layouts

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import MigDataError, builtin_tables
from gpuplan.core.mig.geometry import geometry
from gpuplan.core.mig.load import build_tables, builtin_documents
from tests.migparted_spec import mig_memory_size_gb

GiB = 2**30
SEVEN = {
    "1g": [0, 1, 2, 3, 4, 5, 6],
    "1g2": [0, 2, 4, 6],
    "2g": [0, 2, 4],
    "3g": [0, 4],
    "4g": [0],
    "7g": [0],
}


# (name, compute slices, memory slices, max count, placements) per table, from mig.md §1a, §1b, §2b.
def _seven(
    n1: str, n12: str, n2: str, n3: str, n4: str, n7: str, me: str | None
) -> list[tuple[Any, ...]]:
    rows = [(n1, 1, 1, 7, SEVEN["1g"]), (n12, 1, 2, 4, SEVEN["1g2"]), (n2, 2, 2, 3, SEVEN["2g"]),
            (n3, 3, 4, 2, SEVEN["3g"]), (n4, 4, 4, 1, SEVEN["4g"]), (n7, 7, 8, 1, SEVEN["7g"])]  # fmt: skip
    if me:
        rows.append((me, 1, 1, 1, SEVEN["1g"]))
    return rows


FACTS = {
    "a100-40gb": _seven("1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb", "1g.5gb+me"),
    "a100-80gb": _seven("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me"),
    "h100-80gb": _seven("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me"),
    "h100-94gb": _seven("1g.12gb", "1g.24gb", "2g.24gb", "3g.47gb", "4g.47gb", "7g.94gb", "1g.12gb+me"),
    "h100-96gb": _seven("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", "1g.12gb+me"),
    "h20-96gb": _seven("1g.12gb", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb", "1g.12gb+me"),
    "h200-141gb": _seven("1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb", "1g.18gb+me"),
    "gh200-144gb": _seven("1g.18gb", "1g.36gb", "2g.36gb", "3g.72gb", "4g.72gb", "7g.144gb", "1g.18gb+me"),
    "b200-180gb": _seven("1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb", "1g.23gb+me"),
    "gb200-186gb": _seven("1g.23gb", "1g.47gb", "2g.47gb", "3g.93gb", "4g.93gb", "7g.186gb", "1g.23gb+me"),
    "b300-288gb": _seven("1g.34gb", "1g.67gb", "2g.67gb", "3g.135gb", "4g.135gb", "7g.269gb", "1g.34gb+me"),
    "gb300-288gb": _seven("1g.35gb", "1g.70gb", "2g.70gb", "3g.139gb", "4g.139gb", "7g.278gb", "1g.35gb+me"),
    "a30-24gb": [("1g.6gb", 1, 1, 4, [0, 1, 2, 3]), ("1g.6gb+me", 1, 1, 1, [0, 1, 2, 3]),
                 ("2g.12gb", 2, 2, 2, [0, 2]), ("2g.12gb+me", 2, 2, 1, [0, 2]), ("4g.24gb", 4, 4, 1, [0])],
    "rtx-pro-6000-96gb": [
        ("1g.24gb", 1, 1, 4, [0, 1, 2, 3]), ("1g.24gb+me", 1, 1, 1, [0, 1, 2, 3]),
        ("1g.24gb+gfx", 1, 1, 4, [0, 1, 2, 3]), ("1g.24gb+me.all", 1, 1, 1, [0, 1, 2, 3]),
        ("1g.24gb-me", 1, 1, 4, [0, 1, 2, 3]), ("2g.48gb", 2, 2, 2, [0, 2]), ("2g.48gb+gfx", 2, 2, 2, [0, 2]),
        ("2g.48gb+me.all", 2, 2, 1, [0, 2]), ("2g.48gb-me", 2, 2, 2, [0, 2]), ("4g.96gb", 4, 4, 1, [0]),
        ("4g.96gb+gfx", 4, 4, 1, [0]),
    ],
    # MIG User Guide r610: two slices, at most two instances.
    "rtx-pro-5000-48gb": [
        ("1g.24gb", 1, 1, 2, [0, 1]), ("1g.24gb+me", 1, 1, 1, [0, 1]), ("1g.24gb+gfx", 1, 1, 2, [0, 1]),
        ("1g.24gb+me.all", 1, 1, 1, [0, 1]), ("1g.24gb-me", 1, 1, 2, [0, 1]), ("2g.48gb", 2, 2, 1, [0]),
        ("2g.48gb+gfx", 2, 2, 1, [0]),
    ],
}  # fmt: skip
SLICES = {"a30-24gb": 4, "rtx-pro-6000-96gb": 4, "rtx-pro-5000-48gb": 2}
# Placement tables confirmed by nvidia-smi mig -lgipp or NVML output (mig.md §2a, the B200 and
# A30 captures, the RTX PRO 6000 capture on its 12-unit grid); the rest are unverified.
VERIFIED_PLACEMENTS = {"a100-40gb", "a100-80gb", "h100-80gb", "h100-94gb", "b200-180gb", "a30-24gb",
                       "rtx-pro-6000-96gb"}  # fmt: skip
# Captured usable GiB (nvidia-smi mig -lgip / NVML), the lower figure where captures differ.
USABLE_GIB = {
    ("a100-40gb", "1g.5gb"): 4.75, ("a100-40gb", "1g.10gb"): 9.625, ("a100-40gb", "2g.10gb"): 9.625,
    ("a100-40gb", "3g.20gb"): 19.5, ("a100-40gb", "4g.20gb"): 19.5, ("a100-40gb", "7g.40gb"): 39.25,
    ("a100-80gb", "1g.10gb"): 9.50, ("a100-80gb", "1g.20gb"): 19.50, ("a100-80gb", "3g.40gb"): 39.25,
    ("a100-80gb", "7g.80gb"): 79.00, ("h100-80gb", "1g.10gb"): 9.75, ("h100-80gb", "2g.20gb"): 19.625,
    ("h100-80gb", "3g.40gb"): 39.50, ("h100-80gb", "7g.80gb"): 79.25,
    ("h100-94gb", "1g.12gb"): 10.625, ("h100-94gb", "2g.24gb"): 21.5, ("h100-94gb", "3g.47gb"): 46.125,
    ("h100-94gb", "7g.94gb"): 92.625, ("h100-96gb", "1g.12gb+me"): 11.0, ("h100-96gb", "1g.24gb"): 23.0,
    ("h100-96gb", "4g.48gb"): 46.5, ("h100-96gb", "7g.96gb"): 93.0, ("h200-141gb", "1g.18gb"): 16.0,
    ("h200-141gb", "1g.35gb"): 32.25, ("h200-141gb", "2g.35gb"): 32.25, ("h200-141gb", "3g.71gb"): 69.5,
    ("h200-141gb", "4g.71gb"): 69.5, ("h200-141gb", "7g.141gb"): 139.75, ("b200-180gb", "1g.23gb"): 20.5,
    ("b200-180gb", "1g.45gb"): 44.25, ("b200-180gb", "3g.90gb"): 89.0, ("b200-180gb", "7g.180gb"): 178.5,
    ("a30-24gb", "1g.6gb"): 5.8125, ("a30-24gb", "2g.12gb+me"): 11.6875, ("a30-24gb", "4g.24gb"): 23.4375,
    ("rtx-pro-6000-96gb", "1g.24gb-me"): 23.125, ("rtx-pro-6000-96gb", "2g.48gb+gfx"): 46.5,
    ("rtx-pro-6000-96gb", "4g.96gb"): 95.0, ("gb200-186gb", "1g.23gb+me"): 22.0,
    ("gb200-186gb", "2g.47gb"): 45.5, ("gh200-144gb", "1g.18gb"): 17.5, ("gh200-144gb", "1g.36gb"): 35.25,
}  # fmt: skip
SEVEN_IDS = {"1g": 19, "1g+me": 20, "1g2": 15, "2g": 14, "3g": 9, "4g": 5, "7g": 0}
# Profile IDs seen in captures, by table (nvidia-smi -lgip, NVML device names, a parser fixture).
PROFILE_IDS = {
    "a100-40gb": SEVEN_IDS, "a100-80gb": SEVEN_IDS, "h100-80gb": SEVEN_IDS, "h100-94gb": SEVEN_IDS,
    "h100-96gb": SEVEN_IDS, "b200-180gb": SEVEN_IDS, "h200-141gb": SEVEN_IDS,
    "gb200-186gb": {"1g": 19, "1g+me": 20, "1g2": 15, "2g": 14},
    "gh200-144gb": {"1g": 19, "1g+me": 20, "1g2": 15, "2g": 14},
}  # fmt: skip
NAMED_IDS = {
    "a30-24gb": {"1g.6gb": 14, "1g.6gb+me": 21, "2g.12gb": 5, "2g.12gb+me": 6, "4g.24gb": 0},
    "rtx-pro-6000-96gb": {"1g.24gb": 14, "1g.24gb+me": 21, "1g.24gb+gfx": 47, "1g.24gb+me.all": 65,
                          "1g.24gb-me": 67, "2g.48gb": 5, "2g.48gb+gfx": 35, "2g.48gb+me.all": 64,
                          "2g.48gb-me": 66, "4g.96gb": 0, "4g.96gb+gfx": 32},
}  # fmt: skip


@pytest.fixture(scope="module")
def tables() -> dict[str, Any]:
    return {t.id: t for t in builtin_tables()}


def test_every_table_matches_the_facts(tables: dict[str, Any]) -> None:
    assert set(tables) == set(FACTS)
    for table_id, rows in FACTS.items():
        table = tables[table_id]
        got = {
            (p.name, p.compute_slices, p.memory_slices, p.max_count, tuple(p.placements))
            for p in table.profiles
        }
        assert got == {(n, c, m, k, tuple(s)) for n, c, m, k, s in rows}, table_id
        slots = SLICES.get(table_id, 8)
        assert table.memory_slices == slots
        assert table.compute_slices == (7 if slots == 8 else slots)
        assert table.max_instances == (7 if slots == 8 else slots)


def test_unverified_placements_are_marked(tables: dict[str, Any]) -> None:
    for table_id, table in tables.items():
        for p in table.profiles:
            assert ("placements" in p.unverified) == (table_id not in VERIFIED_PLACEMENTS), (
                table_id,
                p.name,
            )
            if "placements" in p.unverified:
                assert any(s.kind in ("derived", "secondary") for s in p.sources["placements"])
            else:
                assert any(s.kind == "measured" for s in p.sources["placements"])


def test_usable_memory_matches_captures_and_never_the_name(tables: dict[str, Any]) -> None:
    for (table_id, name), gib in USABLE_GIB.items():
        profile = next(p for p in tables[table_id].profiles if p.name == name)
        assert profile.memory_bytes == round(gib * GiB), (table_id, name)
        assert "memory_bytes" not in profile.unverified
    for table in tables.values():
        for p in table.profiles:
            named = int(p.name.split(".")[1].split("gb")[0])
            assert p.memory_bytes < named * GiB, (table.id, p.name)  # the name rounds up


def test_names_follow_the_driver_naming_rule(tables: dict[str, Any]) -> None:
    """go-nvlib names a GI from its memory and the GPU's total (getMigMemorySizeGB): every
    profile's stored memory, captured or derived, must give back its own name there, so a
    derived figure cannot fall below the share its name implies."""
    catalog = builtin_catalog()
    for table in tables.values():
        for gpu_id in table.gpus:
            total = catalog.get(gpu_id).usable_memory_bytes
            for p in table.profiles:
                named = int(p.name.split(".")[1].split("gb")[0])
                assert mig_memory_size_gb(total, p.memory_bytes // 2**20) == named, (gpu_id, p.name)


def test_profile_ids_where_confirmed(tables: dict[str, Any]) -> None:
    for table_id, table in tables.items():
        for p in table.profiles:
            kind = (
                ("1g2" if p.memory_slices == 2 else "1g")
                if p.compute_slices == 1
                else f"{p.compute_slices}g"
            )
            if p.name.endswith("+me"):
                kind = "1g+me"
            expected: int | None
            if table_id in NAMED_IDS:
                expected = NAMED_IDS[table_id][p.name]
            else:
                expected = PROFILE_IDS.get(table_id, {}).get(kind)
            assert p.profile_id == expected, (table_id, p.name)


def test_catalog_and_tables_agree() -> None:
    catalog = builtin_catalog()
    tables = builtin_tables()
    capable = {g.id for g in catalog if g.mig.supported}
    in_tables = [gpu for t in tables for gpu in t.gpus]
    assert len(in_tables) == len(set(in_tables))
    assert capable == set(in_tables)
    for table in tables:
        for gpu_id in table.gpus:
            assert catalog.get(gpu_id).mig.max_instances == table.max_instances


def test_layout_counts_match_the_survey_and_an_independent_enumeration(
    tables: dict[str, Any],
) -> None:
    for table in tables.values():
        assert set(geometry(table).layouts) == independent_layouts(table), table.id
    # mig.md §2c: 77 multisets on the 7-slice class with 1g.2xmem and without +me ...
    h100 = tables["h100-80gb"]
    plain = msgspec.structs.replace(h100, profiles=[p for p in h100.profiles if "+" not in p.name])
    assert len(geometry(plain).layouts) == 77
    assert len(geometry(h100).layouts) == 127
    # ... and the 14 placement-maximal combinations of 1g/2g/3g/4g/7g it lists: no GI can
    # be added to their placement (3g+2g+1g is one: slot 7 is never a 1g start).
    a100 = tables["a100-80gb"]
    plain = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    listed = {
        "7g": {"7g.80gb": 1}, "4g+3g": {"4g.40gb": 1, "3g.40gb": 1},
        "4g+2g+1g": {"4g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}, "4g+1gx3": {"4g.40gb": 1, "1g.10gb": 3},
        "3g+3g": {"3g.40gb": 2}, "3g+2gx2": {"3g.40gb": 1, "2g.20gb": 2},
        "3g+2g+1gx2": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, "3g+2g+1g": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1},
        "3g+1gx4": {"3g.40gb": 1, "1g.10gb": 4}, "3g+1gx3": {"3g.40gb": 1, "1g.10gb": 3},
        "2gx3+1g": {"2g.20gb": 3, "1g.10gb": 1}, "2gx2+1gx3": {"2g.20gb": 2, "1g.10gb": 3},
        "2g+1gx5": {"2g.20gb": 1, "1g.10gb": 5}, "1gx7": {"1g.10gb": 7},
    }  # fmt: skip
    assert _placement_maximal(a100, plain) == {tuple(sorted(v.items())) for v in listed.values()}


def _placement_maximal(table: Any, allowed: list[str]) -> set[tuple[tuple[str, int], ...]]:
    """Multisets with a placement to which no GI of ``allowed`` can be added."""
    profiles = [p for p in table.profiles if p.name in allowed]
    found = set()

    def fits(p: Any, start: int, used: set[int]) -> bool:
        return not set(range(start, start + p.memory_slices)) & used

    def walk(at: int, used: set[int], names: list[str]) -> None:
        if at == table.memory_slices:
            counts = {n: names.count(n) for n in set(names)}
            ok = all(counts[p.name] <= p.max_count for p in profiles if p.name in counts)
            compute = sum(next(p for p in profiles if p.name == n).compute_slices for n in names)
            if names and ok and compute <= table.compute_slices:
                addable = any(
                    fits(p, s, used) and counts.get(p.name, 0) < p.max_count
                    and compute + p.compute_slices <= table.compute_slices and len(names) < table.max_instances
                    for p in profiles for s in p.placements
                )  # fmt: skip
                if not addable:
                    found.add(tuple(sorted(counts.items())))
            return
        walk(at + 1, used, names)
        for p in profiles:
            if at in p.placements and fits(p, at, used):
                walk(
                    at + p.memory_slices,
                    used | set(range(at, at + p.memory_slices)),
                    [*names, p.name],
                )

    walk(0, set(), [])
    return found


def _doc() -> list[tuple[str, Any]]:
    return copy.deepcopy(builtin_documents())


def _profiles(docs: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    profiles = next(d for o, d in docs if "table" in d)["table"][0]["profile"]
    return cast("list[dict[str, Any]]", profiles)  # a TOML document, untyped


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda p: p[0].update(compute_slices=2), "the name says 1g"),
        (lambda p: p[3].update(placements=[0, 7]), "runs past the last slot"),
        (lambda p: p[0].update(placements=[3, 1]), "sorted list"),
        (lambda p: p[0]["sources"].pop("memory_bytes"), "memory_bytes has no source"),
        (
            lambda p: p[0]["sources"].update(memory_bytes=["mig-memory-model"]),
            "list it in `unverified`",
        ),
        (lambda p: p[0]["sources"].update(placements=["no-such-source"]), "unknown source id"),
        (lambda p: p[0].pop("engines"), "engines are unknown"),
        (lambda p: p[1].update(name=p[0]["name"]), "appears twice"),
    ],
)
def test_loader_refuses_bad_data(change: Any, message: str) -> None:
    docs = _doc()
    change(_profiles(docs))
    with pytest.raises(MigDataError, match=message):
        build_tables(docs)


def test_a_gpu_in_two_tables_is_refused() -> None:
    docs = _doc()
    tables = next(d for o, d in docs if "table" in d)["table"]
    tables[1]["gpus"].append(tables[0]["gpus"][0])
    with pytest.raises(MigDataError, match="is in tables"):
        build_tables(docs)
