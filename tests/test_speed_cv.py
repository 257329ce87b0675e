"""The speed model's leave-one-source-out cross-validation (bench/published/cv.py): no
fold sees its own source, and the committed results describe the code as it is."""

import json
import math
from pathlib import Path

import pytest
from bench.published.cv import (
    RESULTS,
    cross_validate,
    folds,
    load_cases,
    regimes,
    source_of,
    workers,
)
from bench.published.fit import fit, measured_half_width, neutral, parameters
from bench.published.runs import load

from gpuplan.core.perf.efficiency import efficiency_data


def test_no_fold_fits_a_run_of_the_source_it_predicts() -> None:
    cases = load_cases()
    seen = set()
    for source, fitted, predicted in folds(cases):
        assert predicted
        assert all(source_of(c.run) == source for c in predicted)
        assert all(source_of(c.run) != source for c in fitted)
        assert all(c.run["split"] == "calibration" for c in fitted)
        seen |= {c.run["id"] for c in predicted}
    assert seen == {c.run["id"] for c in cases}  # every run is predicted once


def test_sources_and_regimes() -> None:
    runs = {r["id"]: r for r in [*load(), *load("inference")]}
    nemo = runs["nemo2407-llama3-8b-h100x8-fp8"]
    assert source_of(nemo) == source_of(runs["nemo2407-gpt3-175b-h100x512-fp8"])
    assert source_of(nemo) != source_of(runs["korthikanti22-gpt22b-a100x8-selective"])
    assert regimes(nemo) == {
        "measure": "tokens_per_s_per_gpu", "framework": "megatron", "generation": "hopper",
        "scale": "2-8 GPUs", "precision": "fp8", "bound": "compute",
    }  # fmt: skip
    assert regimes(runs["nim18-llama33-70b-2xh100-fp8-5000in500out-c50-itl"])["bound"] == "memory"


def test_the_neutral_prior_sits_inside_each_constants_bounds() -> None:
    for p in parameters():
        assert p.low < neutral(p) < p.high, p.name


@pytest.mark.slow
def test_the_committed_cross_validation_is_current() -> None:
    """Every run's in-sample error (any change to the model or the shipped constants
    moves them), and the cross-validated errors of every eighth fold, refitted here (a
    change to the fit moves every fold's): all 32 folds would take most of the slow
    tier's time budget, and ``python -m bench.published.cv --write`` rewrites them all."""
    committed = json.loads(Path(RESULTS).read_text(encoding="utf-8"))
    cases = load_cases()
    in_sample = {c.run["id"]: c.predicted() / c.measured - 1 for c in cases}
    assert list(in_sample) == [r["id"] for r in committed["rows"]]
    for old in committed["rows"]:
        assert in_sample[old["id"]] == pytest.approx(old["in_sample_error"], abs=1e-6), old["id"]
    sample = list(range(0, len(folds(cases)), 8))
    held = cross_validate(cases, processes=workers(), only=sample)
    sources = {folds(cases)[i][0] for i in sample}
    checked = [r for r in committed["rows"] if r["source"] in sources]
    assert sorted(held) == sorted(r["id"] for r in checked)
    for old in checked:
        now = math.exp(held[old["id"]]) - 1
        assert now == pytest.approx(old["cv_error"], abs=1e-4), old["id"]
    assert [p.name for p in parameters()] == committed["fitted_constants"]


def test_gemm_half_width_is_measured_from_the_a100_table_not_fitted() -> None:
    assert "kernels.gemm_half_width" not in [p.name for p in parameters()]
    shipped = efficiency_data().kernels.gemm_half_width
    assert shipped == pytest.approx(measured_half_width(), abs=0.1)
    assert 400 < shipped < 900  # w = 1024 reaches about 60% of the plateau on A100


def test_with_no_run_every_constant_goes_to_the_middle_of_its_bounds() -> None:
    """The shipped values and every fold share one estimator: the pull goes to the
    neutral prior, never to the values fitted before (with no run, nothing else counts)."""
    params = parameters()
    shipped = [p.get() for p in params]
    try:
        fit([], params)
        for p in params:
            assert p.get() == pytest.approx(neutral(p), rel=1e-3), p.name
    finally:
        for p, value in zip(params, shipped, strict=True):
            p.put(value)
