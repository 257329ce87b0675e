"""Leave-one-source-out cross-validation of the speed model: the accuracy to quote.

    python -m bench.published.cv           # the table: every run, by source, by regime
    python -m bench.published.cv --write   # also bench/results/speed_cv.json and the
                                           # residual tables the service's intervals use

A figure measured on the runs the constants were fitted to says how well they were
fitted, not how well the model predicts. Here every published run (training and
serving, ``calibration`` and ``check`` alike) is predicted by the model refitted
without any run of its own source (``source_id``: one document, paper or results page),
so no constant has seen a figure of the source it is judged on.

Each fold refits the constants of :func:`bench.published.fit.parameters` on the
calibration runs of the other sources by :func:`bench.published.fit.fit`, the very
estimator that gives the shipped values: the pull of every constant goes to a
data-independent prior, the middle of its physical bounds (in log space for the
constants fitted as logs), measured in its half-range, never to the shipped value, which
was fitted with the held-out source in; two starts, the shipped values and the prior,
the lower objective kept (the problem is smooth and bounded but not convex, so a single
start could land in a minimum that depends on it). ``kernels.gemm_half_width`` is
measured from a kernel table, not fitted, in every fold as in the shipped values.

Beside it, labelled, the in-sample figure: the shipped constants on every run.

The cross-validated residuals, grouped by regime, are what the service draws its
intervals from (``core/perf/data/residuals.toml``, written here). Their coverage is
checked the same honest way: each run's interval comes from the residuals of the other
sources only, widened where those sources have no run of its regime, and the share of
measured figures inside their 80% intervals is reported.
"""

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from bench.published.fit import Case, ServingCase, fit, parameters
from bench.published.runs import load
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf.efficiency import generation
from gpuplan.core.recommend.intervals import scale_regime
from gpuplan.core.uncertainty import (
    Residual,
    ResidualTable,
    build_table,
    interval,
    spread,
    tables_toml,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "speed_cv.json"
RESIDUALS = ROOT / "service" / "gpuplan" / "core" / "perf" / "data" / "residuals.toml"
COVERAGE = 0.8
"""The intervals' coverage: the issue's 80% prediction interval."""
AXES = ("measure", "framework", "generation", "scale", "precision", "bound")


def source_of(run: dict[str, Any]) -> str:
    """The run's source: its ``source_id``, else the document its ``source`` names (the
    repository and file, or the paper, post or page before its first detail)."""
    if run.get("source_id"):
        return str(run["source_id"])
    text = str(run["source"])
    if text.startswith("repo "):
        return ",".join(text.split(",")[:2]).strip()
    return text.split(",", maxsplit=1)[0].split("(", maxsplit=1)[0].strip()


def regimes(run: dict[str, Any]) -> dict[str, str]:
    """The regimes a run falls in: its framework (or serving measure), scale, precision,
    and whether its time is set by arithmetic or by memory traffic."""
    workload = run["request"].get("workload", {})
    parallelism = workload.get("parallelism", {})
    serving = run.get("kind") == "inference"
    measure = str(run.get("measure", ""))
    if serving:
        framework = "serving"
        # A decode step reads every weight for a few tokens: memory-bound; a prefill
        # (time to first token) and large static batches are arithmetic.
        bound = "memory" if measure in ("tpot_s", "output_tokens_per_s") else "compute"
    else:
        framework = str(parallelism.get("framework", "ddp"))
        bound = "compute"
    return {
        "measure": measure if serving else "tokens_per_s_per_gpu",
        "framework": framework,
        "generation": generation(builtin_catalog().get(run["gpu"])).name,
        "scale": scale_regime(int(run["gpus"])),
        "precision": str(workload.get("precision", "bf16")),
        "bound": bound,
    }


Cases = list[Case | ServingCase]


def _predict_all(cases: Cases) -> dict[str, float]:
    return {c.run["id"]: math.log(c.predicted() / c.measured) for c in cases}


def folds(cases: Cases) -> list[tuple[str, Cases, Cases]]:
    """(source, the cases fitted, the cases predicted) per source: the fitted ones are the
    other sources' calibration runs, the predicted ones every run of the source."""
    by_source: dict[str, Cases] = defaultdict(list)
    for c in cases:
        by_source[source_of(c.run)].append(c)
    return [
        (
            source,
            [c for c in cases if c.run["split"] == "calibration" and source_of(c.run) != source],
            held,
        )
        for source, held in sorted(by_source.items())
    ]


def _fold(cases: Cases, index: int) -> tuple[str, int, int, dict[str, float]]:
    """Fold ``index`` of :func:`folds`: (its source, runs predicted, runs fitted, the
    predicted runs' log errors), fitted from the shipped values and put back after."""
    source, train, held = folds(cases)[index]
    params = parameters()
    shipped = [p.get() for p in params]
    try:
        fit(train, params)
        return source, len(held), len(train), _predict_all(held)
    finally:
        for p, value in zip(params, shipped, strict=True):
            p.put(value)


def load_cases() -> Cases:
    """Every published run, training then serving, resolved once."""
    return [Case(r) for r in load()] + [ServingCase(r) for r in load("inference")]


_WORKER_CASES: Cases = []
"""A worker process's cases (:func:`_start_worker`): built once, as the parent's are."""


def _start_worker() -> None:
    _WORKER_CASES.extend(load_cases())


def _worker_fold(index: int) -> tuple[str, int, int, dict[str, float]]:
    return _fold(_WORKER_CASES, index)


def workers() -> int:
    """Processes for the folds: the CPUs this process may use (at most 8)."""
    return max(1, min(len(os.sched_getaffinity(0)), 8))


def cross_validate(
    cases: Cases,
    progress: Callable[[str], None] = lambda _: None,
    processes: int = 1,
    only: list[int] | None = None,
) -> dict[str, float]:
    """The log error of each case predicted by the model fitted without its source.

    Each fold starts from the shipped values and is fitted alone, so the folds are
    independent: with ``processes`` above 1 they run in that many fresh (spawned)
    processes, each building the published runs' cases as :func:`load_cases` does,
    with the same results as one process (``cases`` must then be :func:`load_cases`'s).
    Two starts per fold make a fold the slow part of the suite's slow tier. ``only``:
    these folds (indices into :func:`folds`) alone, for a check of a sample."""
    indices = range(len(folds(cases))) if only is None else only
    if processes <= 1:
        results = [_fold(cases, i) for i in indices]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, context, initializer=_start_worker) as pool:
            results = list(pool.map(_worker_fold, indices))
    out: dict[str, float] = {}
    for source, held, train, errors in results:
        out |= errors
        progress(f"{source}: {held} run(s) predicted, fitted on {train}")
    return out


def _stats(errors: list[float]) -> dict[str, Any]:
    ratios = [math.exp(e) - 1 for e in errors]
    absolute = sorted(abs(r) for r in ratios)
    return {
        "runs": len(ratios),
        "median_abs_error": statistics.median(absolute) if absolute else None,
        "worst_abs_error": absolute[-1] if absolute else None,
        "median_signed_error": statistics.median(ratios) if ratios else None,
    }


def _table(rows: list[dict[str, Any]], kind: str) -> ResidualTable:
    """The residual table of ``rows`` (their cross-validated errors), one group per
    regime of each axis."""
    residuals = [
        Residual(
            source=r["source"],
            gpus=r["gpus"],
            regime={a: r[a] for a in AXES},
            log_error=math.log1p(r["cv_error"]),
        )
        for r in rows
    ]
    return build_table(
        residuals,
        AXES,
        measure="tokens_per_s_per_gpu" if kind == "training" else "serving",
        written_by="python -m bench.published.cv --write",
        method="leave-one-source-out cross-validation over bench/published/runs.toml",
    )


def outside(run: dict[str, Any], others: list[dict[str, Any]]) -> list[str]:
    """Why ``run`` lies outside what ``others`` measured: a regime none of them has, or
    more GPUs than the largest of them."""
    reasons = [
        f"no measured run of {axis} {run[axis]}"
        for axis in ("framework", "generation", "precision")
        if not any(o[axis] == run[axis] for o in others)
    ]
    if others and run["gpus"] > max(o["gpus"] for o in others):
        reasons.append(f"{run['gpus']} GPUs, past the largest measured run")
    return reasons


def coverage(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """Each run's 80% interval from the other sources' residuals alone; how many hold
    their measured figure."""
    inside = 0
    for r in rows:
        others = [o for o in rows if o["source"] != r["source"]]
        if len(others) < 2:
            continue
        table = _table(others, kind)
        s = spread(table, {a: r[a] for a in AXES}, outside(r, others))
        bounds = interval(1.0, s, COVERAGE)  # measured / predicted
        ratio = 1 / (1 + r["cv_error"])
        r["interval_low"], r["interval_high"] = bounds.low, bounds.high
        r["inside"] = bounds.low <= ratio <= bounds.high
        inside += r["inside"]
    checked = sum(1 for r in rows if "inside" in r)
    return {"coverage": COVERAGE, "runs": checked, "inside": inside, "share": inside / checked}


def by_measure(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Serving's errors and interval coverage per measure (output tokens/s, TTFT, TPOT,
    requests/s): issue 34 sets a target on each, so each is reported on its own."""
    out: dict[str, Any] = {}
    for measure in sorted({r["measure"] for r in rows}):
        chosen = [r for r in rows if r["measure"] == measure]
        checked = [r for r in chosen if "inside" in r]
        out[measure] = {
            "in_sample": _stats([math.log1p(r["in_sample_error"]) for r in chosen]),
            "cross_validated": _stats([math.log1p(r["cv_error"]) for r in chosen]),
            "intervals": {
                "runs": len(checked),
                "inside": sum(bool(r["inside"]) for r in checked),
            },
        }
    return out


def evaluate(
    progress: Callable[[str], None] = lambda _: None, processes: int | None = None
) -> dict[str, Any]:
    """The table: in-sample and cross-validated errors of every run, by regime, with the
    intervals' coverage (``processes``: for the folds; default :func:`workers`)."""
    cases = load_cases()
    in_sample = _predict_all(cases)
    held_out = cross_validate(cases, progress, workers() if processes is None else processes)
    rows = []
    for c in cases:
        run = c.run
        rows.append(
            {
                "id": run["id"],
                "source": source_of(run),
                "split": run["split"],
                "kind": run.get("kind", "training"),
                **regimes(run),
                "gpus": int(run["gpus"]),
                "measured": c.measured,
                "in_sample_error": math.exp(in_sample[run["id"]]) - 1,
                "cv_error": math.exp(held_out[run["id"]]) - 1,
            }
        )
    result: dict[str, Any] = {
        "method": "leave-one-source-out; each fold refits the constants on the other "
        "sources' calibration runs, pulled to the middle of their bounds (fit.fit, "
        "the shipped values' estimator)",
        "fitted_constants": [p.name for p in parameters()],
        "sources": len({r["source"] for r in rows}),
        "rows": rows,
        "summary": {},
    }
    for kind in ("training", "inference"):
        chosen = [r for r in rows if r["kind"] == kind]
        result["summary"][kind] = {
            "in_sample": _stats([math.log1p(r["in_sample_error"]) for r in chosen]),
            "cross_validated": _stats([math.log1p(r["cv_error"]) for r in chosen]),
            "intervals": coverage(chosen, kind),
        }
    result["summary"]["inference"]["by_measure"] = by_measure(
        [r for r in rows if r["kind"] == "inference"]
    )
    by_regime: dict[str, dict[str, Any]] = {}
    for axis in AXES:
        groups: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            groups[r[axis]].append(math.log1p(r["cv_error"]))
        by_regime[axis] = {name: _stats(errors) for name, errors in sorted(groups.items())}
    result["by_regime"] = by_regime
    groups = defaultdict(list)
    for r in rows:
        groups[r["source"]].append(math.log1p(r["cv_error"]))
    result["by_source"] = {name: _stats(errors) for name, errors in sorted(groups.items())}
    return result


def report(result: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.1%}"

    def line(label: str, s: dict[str, Any]) -> str:
        if not s["runs"]:
            return f"  {label:<28} (no runs)"
        return (
            f"  {label:<28} {s['runs']:>3} runs  median {s['median_abs_error']:.1%}  "
            f"worst {s['worst_abs_error']:.1%}  signed median {pct(s['median_signed_error'])}"
        )

    lines = [f"{'run':<50} {'source':<40} {'in-sample':>9} {'cv':>8}"]
    for r in result["rows"]:
        lines.append(
            f"{r['id']:<50} {r['source'][:40]:<40} {pct(r['in_sample_error']):>9} "
            f"{pct(r['cv_error']):>8}"
        )
    lines.append("")
    lines.append(f"{len(result['fitted_constants'])} fitted constants, {result['sources']} sources")
    for kind, s in result["summary"].items():
        lines.append(f"{kind}:")
        lines.append(line("in-sample (shipped)", s["in_sample"]))
        lines.append(line("leave-one-source-out", s["cross_validated"]))
        c = s["intervals"]
        lines.append(
            f"  {c['coverage']:.0%} intervals (other sources' residuals): {c['inside']} of "
            f"{c['runs']} runs inside ({c['share']:.0%})"
        )
        for measure, m in s.get("by_measure", {}).items():
            lines.append(line(f"{measure}, in-sample", m["in_sample"]))
            lines.append(line(f"{measure}, cross-validated", m["cross_validated"]))
            lines.append(
                f"  {'':<28} intervals: {m['intervals']['inside']} of {m['intervals']['runs']} inside"
            )
    for axis, groups in result["by_regime"].items():
        lines.append(f"cross-validated by {axis}:")
        lines += [line(name, s) for name, s in groups.items()]
    lines.append("cross-validated by source:")
    lines += [line(name[:28], s) for name, s in result["by_source"].items()]
    return "\n".join(lines)


def run() -> dict[str, Any]:
    """The suite's entry (``python -m bench speed_cv``): the table on stderr."""
    result = evaluate(lambda text: print(text, file=sys.stderr))
    print(report(result), file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    result = evaluate(lambda text: print(text, file=sys.stderr))
    print(report(result))
    if args.write:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {RESULTS}")
        RESIDUALS.write_text(residuals_toml(result), encoding="utf-8")
        print(f"wrote {RESIDUALS}")


def residuals_toml(result: dict[str, Any]) -> str:
    """The service's residual tables, one per kind of prediction, as TOML."""
    tables = [
        _table([r for r in result["rows"] if r["kind"] == kind], kind)
        for kind in ("training", "inference")
    ]
    return tables_toml(
        tables,
        [
            "Cross-validated residuals of the speed model: what its intervals are drawn from",
            "(core/uncertainty). Written by `python -m bench.published.cv --write`; do not edit.",
            "Each run was predicted by constants fitted without its source (bench/published/cv.py);",
            "a residual is log(predicted / measured).",
        ],
    )


if __name__ == "__main__":
    main()
