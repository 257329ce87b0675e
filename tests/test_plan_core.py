"""The plan core: each target's semantics against the cores it builds on, ids, determinism."""

import re
from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import Catalog, builtin_catalog
from gpuplan.core.ci import CiPlan, CiReport, InvalidCiPlan, check
from gpuplan.core.ci.mig_fit import plain_profiles
from gpuplan.core.ci.schema import Verdict
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.fleet import MeasuredFlops
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.mig import builtin_tables
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.recommend import RecommendRequest, recommend
from tests.helpers import EVERY_TARGET, LLAMA_TRAINING, request_body

LLAMA_INFERENCE: dict[str, Any] = request_body(
    "llama-2-7b", mode="inference", sequence_length=4096, precision="bf16", max_new_tokens=256
)


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return builtin_catalog()


def _plan(catalog: Catalog, base: dict[str, Any], **targets: Any) -> CiReport:
    return check(msgspec.convert({**base, "targets": targets}, CiPlan), catalog)


def _verdict(report: CiReport, target: str) -> Verdict:
    (found,) = [v for v in report.verdicts if v.target == target]
    return found


def test_fits_is_the_estimators_required_bytes_against_usable_memory(catalog: Catalog) -> None:
    # Llama-2-7B bf16 at 4k context: fits a 24 GB L4, not a 16 GB T4 (issue 6's anchor).
    l4 = _plan(catalog, LLAMA_INFERENCE, fits={"gpu": "NVIDIA L4"})
    t4 = _plan(catalog, LLAMA_INFERENCE, fits={"gpu": "tesla-t4-16gb"})
    direct = estimate(
        msgspec.convert({**LLAMA_INFERENCE, "gpu": "NVIDIA L4"}, EstimateRequest),
        catalog,
    )
    v = _verdict(l4, "fits")
    assert v.status == "pass"
    assert l4.passed
    assert direct.fit is not None
    assert v.actual == direct.required_bytes == direct.fit.required_bytes
    assert v.limit == direct.fit.usable_memory_bytes
    assert v.gpu == "l4-24gb"
    assert v.count == 1
    t = _verdict(t4, "fits")
    assert t.status == "fail"
    assert not t4.passed
    assert isinstance(t.actual, int)
    assert isinstance(t.limit, int)
    assert t.actual > t.limit
    assert "does not fit" in t.reason


def test_fits_at_a_count_shards_like_the_recommendation(catalog: Catalog) -> None:
    one = _verdict(_plan(catalog, LLAMA_TRAINING, fits={"gpu": "a100-sxm4-80gb"}), "fits")
    four = _verdict(
        _plan(catalog, LLAMA_TRAINING, fits={"gpu": "a100-sxm4-80gb", "count": 4}), "fits"
    )
    assert one.status == "fail"
    assert four.status == "pass"
    assert isinstance(one.actual, int)
    assert isinstance(four.actual, int)
    assert four.actual < one.actual / 2
    assert four.layout is not None
    # The least memory at four: tensor parallelism over them under Megatron (41.1 GiB at
    # 95%), whose fused Adam steps in place, just below ZeRO-3 over four data-parallel
    # ranks (42.6 GiB under FSDP2), whose foreach Adam builds a temporary of its shard.
    assert four.layout == "t4p1d1z0"
    # The recommendation, asked for at most 4 A100s, sizes its plan no smaller.
    rec = recommend(
        msgspec.convert(
            {
                **LLAMA_TRAINING,
                "constraints": {"include": ["a100-sxm4-80gb"], "max_gpus_per_job": 4},
                "all_counts": True,
            },
            RecommendRequest,
        ),
        catalog,
    )
    at_four = [r for r in rec.recommendations if r.count == 4 and r.fits]
    assert at_four
    assert all(r.required_bytes_per_gpu >= four.actual for r in at_four)


def test_more_gpus_never_need_more_memory_per_gpu(catalog: Catalog) -> None:
    three = _verdict(
        _plan(catalog, LLAMA_TRAINING, fits={"gpu": "a100-sxm4-80gb", "count": 3}), "fits"
    )
    assert three.status == "fail"
    assert "global batch of 1024 sequence" in three.reason
    previous = None
    for count in (1, 2, 4, 8, 16):
        v = _verdict(
            _plan(catalog, LLAMA_TRAINING, fits={"gpu": "a100-sxm4-80gb", "count": count}), "fits"
        )
        assert isinstance(v.actual, int)
        assert v.layout is not None
        tensor, pipeline, data = (int(x) for x in re.findall(r"[tpd](\d+)", v.layout)[:3])
        assert tensor * pipeline * data == count
        if previous is not None:
            assert v.actual <= previous
        previous = v.actual


def test_headroom_is_one_minus_required_over_usable(catalog: Catalog) -> None:
    report = _plan(catalog, LLAMA_INFERENCE, fits={"gpu": "NVIDIA L4"}, min_memory_headroom=0.1)
    fits = _verdict(report, "fits")
    head = _verdict(report, "min_memory_headroom")
    assert isinstance(fits.actual, int)
    assert isinstance(fits.limit, int)
    expected = 1 - fits.actual / fits.limit
    assert head.actual == pytest.approx(expected, abs=1e-6)
    assert head.status == "pass"
    above = _plan(
        catalog, LLAMA_INFERENCE, fits={"gpu": "NVIDIA L4"}, min_memory_headroom=expected + 0.001
    )
    assert _verdict(above, "min_memory_headroom").status == "fail"
    assert not above.passed


def test_headroom_without_fits_uses_the_top_recommendation(catalog: Catalog) -> None:
    report = _plan(catalog, LLAMA_INFERENCE, min_memory_headroom=0.01)
    top = report.recommendations[0]
    v = _verdict(report, "min_memory_headroom")
    assert v.gpu == top.gpu
    assert v.actual == pytest.approx(
        1 - top.required_bytes_per_gpu / top.usable_memory_bytes, abs=1e-6
    )


def test_cost_and_time_are_the_best_plan_on_the_fits_gpu_at_its_count(catalog: Catalog) -> None:
    report = _plan(
        catalog,
        LLAMA_TRAINING,
        fits={"gpu": "a100-sxm4-80gb", "count": 4},
        max_cost_usd=1e6,
        max_time_hours=1e5,
    )
    rec = recommend(
        msgspec.convert(
            {
                **LLAMA_TRAINING,
                "constraints": {"include": ["a100-sxm4-80gb"], "max_gpus_per_job": 4},
            },
            RecommendRequest,
        ),
        catalog,
    )
    best = rec.recommendations[0]
    cost, time = _verdict(report, "max_cost_usd"), _verdict(report, "max_time_hours")
    assert best.cost_usd is not None
    assert best.time_hours is not None
    assert cost.actual == pytest.approx(best.cost_usd)
    assert cost.status == "pass"
    assert time.actual == pytest.approx(best.time_hours)
    assert time.status == "pass"
    assert cost.count == best.count <= 4
    tight = _plan(
        catalog,
        LLAMA_TRAINING,
        fits={"gpu": "a100-sxm4-80gb", "count": 4},
        max_cost_usd=best.cost_usd * 0.99,
    )
    assert _verdict(tight, "max_cost_usd").status == "fail"


def test_cost_without_fits_is_the_top_recommendations(catalog: Catalog) -> None:
    report = _plan(catalog, LLAMA_TRAINING, max_cost_usd=1e9)
    top = report.recommendations[0]
    v = _verdict(report, "max_cost_usd")
    assert v.gpu == top.gpu
    assert v.actual == pytest.approx(top.cost_usd)


def test_cost_fails_when_the_fits_gpu_cannot_run_the_job(catalog: Catalog) -> None:
    report = _plan(catalog, LLAMA_TRAINING, fits={"gpu": "NVIDIA L4"}, max_cost_usd=1e9)
    v = _verdict(report, "max_cost_usd")
    assert v.status == "fail"
    assert v.actual is None
    assert "does not fit" in v.reason


def test_mig_fit_is_the_smallest_plain_profile_by_usable_memory(catalog: Catalog) -> None:
    report = _plan(catalog, LLAMA_INFERENCE, fits={"gpu": "NVIDIA L4"})
    tables = {g: t for t in builtin_tables() for g in t.gpus}
    assert {m.gpu for m in report.mig} == {g for g in tables if g in {x.id for x in catalog}}
    for m in report.mig:
        plain = plain_profiles(tables[m.gpu])
        holding = [p for p in plain if p.memory_bytes >= m.required_bytes]
        if not holding:
            assert m.profile is None
            assert m.resource is None
            continue
        assert m.profile == holding[0].name
        assert m.memory_bytes == holding[0].memory_bytes
        assert m.resource == f"nvidia.com/mig-{m.profile}"
        assert all(
            p.memory_bytes < m.required_bytes
            for p in plain
            if p.memory_bytes < holding[0].memory_bytes
        )
    a100 = next(m for m in report.mig if m.gpu == "a100-sxm4-80gb")
    # A 7B at 4k fits some slice of an A100 80GB: which one follows the rule above (the
    # "1g.20gb" name promises 20 GB, the driver offers 19.5 GiB).
    assert a100.profile in {"1g.20gb", "2g.20gb", "3g.40gb"}


def test_mig_fit_uses_usable_memory_not_the_name(catalog: Catalog) -> None:
    # Llama-2-13B at 4k needs ~31 GiB: a 3g.40gb slice of an A100 80GB (39.25 GiB usable).
    llama_13b = {**LLAMA_INFERENCE, "model": {"name": "llama-2-13b"}}
    report = _plan(
        catalog,
        llama_13b,
        mig_profile_at_most={"gpu": "NVIDIA A100-SXM4-80GB", "profile": "nvidia.com/mig-3g.40gb"},
    )
    v = _verdict(report, "mig_profile_at_most")
    assert v.status == "pass"
    assert v.profile == "3g.40gb"
    a100 = next(m for m in report.mig if m.gpu == "a100-sxm4-80gb")
    assert a100.resource == "nvidia.com/mig-3g.40gb"
    small = _plan(
        catalog, llama_13b, mig_profile_at_most={"gpu": "a100-sxm4-80gb", "profile": "2g.20gb"}
    )
    s = _verdict(small, "mig_profile_at_most")
    assert s.status == "fail"
    assert s.profile == "3g.40gb"
    assert isinstance(s.actual, int)
    assert isinstance(s.limit, int)
    assert s.actual > s.limit


def test_plan_id_hashes_the_normalized_input(catalog: Catalog) -> None:
    doc = {**LLAMA_INFERENCE, "targets": {"fits": {"gpu": "NVIDIA L4"}}}
    explicit = {
        "targets": {"fits": {"count": 1, "gpu": "NVIDIA L4"}},
        "objective": "balanced",
        "workload": {**LLAMA_INFERENCE["workload"], "batch_size": 1},
        "model": LLAMA_INFERENCE["model"],
    }
    a = check(msgspec.convert(doc, CiPlan), catalog)
    b = check(msgspec.convert(explicit, CiPlan), catalog)
    assert a.plan_id == b.plan_id
    assert a.plan_id.startswith("sha256:")
    assert len(a.plan_id) == 71
    assert msgspec.json.encode(a) == msgspec.json.encode(b)
    other = {**doc, "targets": {"fits": {"gpu": "NVIDIA L4", "count": 2}}}
    assert check(msgspec.convert(other, CiPlan), catalog).plan_id != a.plan_id


def test_same_input_gives_byte_identical_json(catalog: Catalog) -> None:
    doc = {**LLAMA_TRAINING, "targets": EVERY_TARGET}
    first = msgspec.json.encode(check(msgspec.convert(doc, CiPlan), catalog))
    again = msgspec.json.encode(check(msgspec.convert(doc, CiPlan), builtin_catalog()))
    assert first == again


def test_fleet_measurements_replace_the_datasheet_but_not_the_request(catalog: Catalog) -> None:
    doc = {
        **LLAMA_TRAINING,
        "targets": {"fits": {"gpu": "a100-sxm4-80gb", "count": 4}, "max_time_hours": 1e5},
    }
    request = msgspec.convert(doc, CiPlan)
    datasheet = check(request, catalog)
    peak = catalog.get("a100-sxm4-80gb").peak_flops.get("bf16")
    assert peak is not None
    slow = MeasuredFlops(
        catalog_id="a100-sxm4-80gb",
        dtype="bf16",
        devices=8,
        median_flops_per_second=peak / 2,
        min_flops_per_second=peak / 2,
        max_flops_per_second=peak / 2,
    )
    measured = check(request, catalog, [slow])
    t0, t1 = _verdict(datasheet, "max_time_hours"), _verdict(measured, "max_time_hours")
    assert isinstance(t0.actual, float)
    assert isinstance(t1.actual, float)
    assert t1.actual > t0.actual * 1.5
    assert measured.plan_id != datasheet.plan_id
    own = msgspec.convert(
        {**doc, "measured_flops": {"NVIDIA A100-SXM4-80GB": {"bf16": peak}}}, CiPlan
    )
    assert _verdict(check(own, catalog, [slow]), "max_time_hours").actual == pytest.approx(
        _verdict(check(own, catalog), "max_time_hours").actual
    )


@pytest.mark.parametrize(
    ("targets", "path", "kind"),
    [
        ({}, "$.targets", InvalidCiPlan),
        ({"fits": {"gpu": "NVIDIA L5"}}, "$.targets.fits.gpu", InvalidRequest),
        (
            {"mig_profile_at_most": {"gpu": "NVIDIA L4", "profile": "1g.10gb"}},
            "$.targets.mig_profile_at_most.gpu",
            MigInputError,
        ),
        (
            {"mig_profile_at_most": {"gpu": "a100-sxm4-80gb", "profile": "5g.50gb"}},
            "$.targets.mig_profile_at_most.profile",
            MigInputError,
        ),
    ],
)
def test_bad_targets_name_the_field(
    catalog: Catalog, targets: dict[str, Any], path: str, kind: type[InvalidRequest]
) -> None:
    with pytest.raises(kind) as caught:
        check(msgspec.convert({**LLAMA_INFERENCE, "targets": targets}, CiPlan), catalog)
    assert caught.value.errors[0][0] == path


def test_missing_work_volume_names_the_field(catalog: Catalog) -> None:
    doc = {**LLAMA_TRAINING, "targets": {"max_cost_usd": 10}}
    del doc["training"]
    with pytest.raises(InvalidRequest) as caught:
        check(msgspec.convert(doc, CiPlan), catalog)
    assert caught.value.errors[0][0] == "$.training"


def test_unknown_target_is_refused_by_the_schema() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.targets"):
        msgspec.convert({**LLAMA_INFERENCE, "targets": {"fit": {"gpu": "NVIDIA L4"}}}, CiPlan)


def test_a_hybrid_plan_carries_the_recommendations_hybrid_comparison(catalog: Catalog) -> None:
    base = {**LLAMA_TRAINING, "constraints": {"deployment": "hybrid"}}
    report = _plan(catalog, base, fits={"gpu": "a100-sxm4-80gb", "count": 4})
    rec = recommend(msgspec.convert(base, RecommendRequest), catalog)
    assert report.hybrid is not None
    assert report.hybrid == rec.hybrid
    assert _plan(catalog, LLAMA_TRAINING, fits={"gpu": "a100-sxm4-80gb"}).hybrid is None


def test_a_fits_only_training_plan_needs_no_training_volume() -> None:
    doc = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "finetune_lora", "sequence_length": 2048},
        "targets": {"fits": {"gpu": "a100-sxm4-80gb", "count": 1}, "min_memory_headroom": 0.1},
    }
    report = check(msgspec.convert(doc, CiPlan), builtin_catalog())
    assert [v.status for v in report.verdicts] == ["pass", "pass"]
    assert report.recommendations
    assert all(c.time_hours is None and c.cost_usd is None for c in report.recommendations)
    assert any("no training work in the plan" in a for a in report.assumptions)


def test_a_cost_target_without_training_volume_names_training() -> None:
    doc = {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "training", "sequence_length": 2048},
        "targets": {"fits": {"gpu": "a100-sxm4-80gb", "count": 8}, "max_cost_usd": 100},
    }
    with pytest.raises(InvalidRequest) as info:
        check(msgspec.convert(doc, CiPlan), builtin_catalog())
    assert info.value.errors[0][0] == "$.training"
    assert "max_cost_usd" in info.value.errors[0][1]
