"""Layout validation: the valid and invalid combinations of the MIG User Guide and the survey."""

from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import MigInputError, ValidateRequest, validate
from gpuplan.core.mig.geometry import first_fit, geometry
from gpuplan.core.mig.load import builtin_tables


def check(gpu: str, *instances: Any) -> Any:
    body = {
        "gpu": gpu,
        "instances": [
            {"profile": i} if isinstance(i, str) else {"profile": i[0], "start": i[1]}
            for i in instances
        ],
    }
    return validate(msgspec.convert(body, ValidateRequest), builtin_catalog())


def kinds(result: Any) -> list[str]:
    return [r.kind for r in result.reasons]


@pytest.mark.parametrize(
    "gpu", ["a100-sxm4-80gb", "h100-sxm5-80gb", "a100-pcie-40gb", "h200-sxm-141gb"]
)
def test_4g_plus_3g_is_valid_and_fills_the_gpu(gpu: str) -> None:
    names = {p.compute_slices: p.name for p in _table(gpu).profiles if p.memory_slices == 4}
    result = check(gpu, names[3], names[4])
    assert result.valid
    assert [(p.profile, p.start) for p in result.placement] == [(names[4], 0), (names[3], 4)]
    assert result.creation_order == [names[4], names[3]]  # 3g first would take slot 0
    assert result.stranded_compute_slices == 0
    assert result.compute_slices_used == 7


def test_4g_plus_4g_is_invalid() -> None:
    result = check("a100-sxm4-80gb", "4g.40gb", "4g.40gb")
    assert not result.valid
    assert "too-many-of-profile" in kinds(result)
    assert result.placement is None


def test_3g_plus_3g_is_full_with_one_compute_slice_stranded() -> None:
    result = check("a100-sxm4-80gb", "3g.40gb", "3g.40gb")
    assert result.valid
    assert result.memory_slices_used == 8
    assert result.stranded_compute_slices == 1
    assert [w.kind for w in result.warnings] == ["stranded-compute"]


def test_seven_1g_are_valid() -> None:
    result = check("a100-sxm4-80gb", *["1g.10gb"] * 7)
    assert result.valid
    assert sorted(p.start for p in result.placement) == list(range(7))


def test_eight_1g_are_invalid() -> None:
    assert "too-many-of-profile" in kinds(check("a100-sxm4-80gb", *["1g.10gb"] * 8))


@pytest.mark.parametrize("gpu", ["a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb"])
def test_slot_7_is_never_a_1g_start(gpu: str) -> None:
    one_g = next(p.name for p in _table(gpu).profiles if p.memory_slices == 1 and "+" not in p.name)
    assert kinds(check(gpu, (one_g, 7))) == ["no-such-placement"]
    # 3g at 0 and 1g at 4, 5, 6 leave slot 7 free, yet a fifth 1g cannot go anywhere.
    three_g = next(p.name for p in _table(gpu).profiles if p.compute_slices == 3)
    result = check(gpu, (three_g, 0), (one_g, 4), (one_g, 5), (one_g, 6), one_g)
    assert kinds(result) == ["no-placement"]
    # The same five GIs fit when the 3g goes to slot 4.
    assert check(gpu, three_g, *[one_g] * 4).valid


def test_overlap_and_bad_start_are_reported_with_the_instances() -> None:
    result = check("a100-sxm4-80gb", ("3g.40gb", 0), ("2g.20gb", 2), ("2g.20gb", 5))
    assert kinds(result) == ["no-such-placement", "overlap"]
    assert result.reasons[0].instances == [2]
    assert result.reasons[1].instances == [0, 1]


def test_3g_2g_2g_needs_the_3g_at_slot_4() -> None:
    assert kinds(check("a100-sxm4-80gb", ("3g.40gb", 0), "2g.20gb", "2g.20gb")) == ["no-placement"]
    result = check("a100-sxm4-80gb", "3g.40gb", "2g.20gb", "2g.20gb")
    assert result.valid
    assert [(p.profile, p.start) for p in result.placement] == [
        ("2g.20gb", 0),
        ("2g.20gb", 2),
        ("3g.40gb", 4),
    ]
    # Creating the 3g first would put it at 0 and strand the second 2g.
    assert result.creation_order.index("3g.40gb") > result.creation_order.index("2g.20gb")


def test_one_media_extension_per_gpu_and_none_beside_7g() -> None:
    assert "engines" in kinds(check("a100-sxm4-80gb", "1g.10gb+me", "1g.10gb+me"))
    assert "compute" in kinds(check("a100-sxm4-80gb", "7g.80gb", "1g.10gb"))
    assert check("a30-24gb", "1g.6gb+me", "2g.12gb", "1g.6gb").valid
    assert "engines" in kinds(check("a30-24gb", "1g.6gb+me", "2g.12gb+me"))


def test_explicit_starts_are_kept_and_get_a_creation_order() -> None:
    result = check("h100-sxm5-80gb", ("1g.10gb", 6), ("2g.20gb", 0))
    assert result.valid
    assert [(p.profile, p.start) for p in result.placement] == [("2g.20gb", 0), ("1g.10gb", 6)]
    assert result.creation_order is None  # first-fit never puts a lone 1g at 6 (it needs 1-5 taken)
    result = check("h100-sxm5-80gb", ("4g.40gb", 0), ("2g.20gb", 4), ("1g.10gb", 6))
    assert result.creation_order == ["4g.40gb", "2g.20gb", "1g.10gb"]


def test_every_layout_has_a_first_fit_creation_order() -> None:
    """The rule of creation_order: create largest first, else the first order that works."""
    for table in builtin_tables():
        for counts in geometry(table).layouts:
            result = validate(
                ValidateRequest(
                    gpu=table.gpus[0],
                    instances=[
                        msgspec.convert({"profile": p.name}, _instance())
                        for p, n in zip(table.profiles, counts, strict=True)
                        for _ in range(n)
                    ],
                ),
                builtin_catalog(),
            )
            assert result.valid, (table.id, counts)
            assert result.creation_order is not None
            assert result.placement is not None
            order = [_index(table, n) for n in result.creation_order]
            starts = first_fit(table, order)
            assert starts is not None, (table.id, counts)
            placed = sorted(zip(result.creation_order, starts, strict=True), key=lambda x: x[1])
            assert placed == [(p.profile, p.start) for p in result.placement]


def test_unverified_profiles_are_named() -> None:
    assert check("gb200-186gb", "3g.93gb").unverified == ["3g.93gb"]
    assert check("b200-180gb", "3g.90gb").unverified == []  # captured on hardware
    assert check("h100-sxm5-80gb", "3g.40gb").unverified == []


def test_unknown_profile_and_non_mig_gpu() -> None:
    with pytest.raises(MigInputError) as info:
        check("a100-sxm4-80gb", "3g.40gb", "5g.50gb")
    assert info.value.path == "$.instances[1].profile"
    assert info.value.kind == "unknown-profile"
    with pytest.raises(MigInputError) as info:
        check("l40s-48gb", "1g.10gb")
    assert info.value.kind == "mig-unsupported"


def test_kubernetes_and_nvidia_smi_names_are_accepted() -> None:
    assert check("a100-sxm4-80gb", "nvidia.com/mig-1g.10gb.me", "MIG 3g.40gb").valid


def _table(gpu: str) -> Any:
    return next(t for t in builtin_tables() if builtin_catalog().get(gpu).id in t.gpus)


def _index(table: Any, name: str) -> int:
    return [p.name for p in table.profiles].index(name)


def _instance() -> Any:
    from gpuplan.core.mig.schema import LayoutInstance

    return LayoutInstance
