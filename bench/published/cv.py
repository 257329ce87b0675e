"""Leave-one-source-out cross-validation of the speed model: the accuracy to quote.

    python -m bench.published.cv           # the table: every run, by source, by regime
    python -m bench.published.cv --write   # also bench/results/speed_cv.json

A figure measured on the runs the constants were fitted to says how well they were
fitted, not how well the model predicts. Here every published run (training and
serving, ``calibration`` and ``check`` alike) is predicted by the model refitted
without any run of its own source (``source_id``: one document, paper or results page),
so no constant has seen a figure of the source it is judged on.

Each fold refits the constants of :func:`bench.published.fit.parameters` on the
calibration runs of the other sources, as ``fit.py`` does for the shipped values, with
one difference that keeps the fold honest: the weak pull of every constant goes to a
data-independent prior, the middle of its physical bounds (in log space for the
constants fitted as logs), never to the shipped value, which was fitted with the held-out
source in. The fold starts from the shipped values only to converge in a few steps: with
the pull towards the neutral prior, the optimum it reaches does not depend on the start
(the problem is smooth and bounded), only the time does.

Beside it, labelled, the in-sample figure: the shipped constants on every run.
"""

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.published.fit import Case, Parameter, ServingCase, fit, parameters
from bench.published.runs import load

RESULTS = Path(__file__).resolve().parents[1] / "results" / "speed_cv.json"


def source_of(run: dict[str, Any]) -> str:
    """The run's source: its ``source_id``, else the document its ``source`` names (the
    repository and file, or the paper, post or page before its first detail)."""
    if run.get("source_id"):
        return str(run["source_id"])
    text = str(run["source"])
    if text.startswith("repo "):
        return ",".join(text.split(",")[:2]).strip()
    return text.split(",", maxsplit=1)[0].split("(", maxsplit=1)[0].strip()


def _scale(gpus: int) -> str:
    if gpus <= 1:
        return "1 GPU"
    if gpus <= 8:
        return "2-8 GPUs"
    if gpus <= 128:
        return "9-128 GPUs"
    return "over 128 GPUs"


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
        "framework": framework,
        "scale": _scale(int(run["gpus"])),
        "precision": str(workload.get("precision", "bf16")),
        "bound": bound,
    }


def neutral(p: Parameter) -> float:
    """A constant's data-independent prior: the middle of its bounds (geometric for a
    constant fitted as a log)."""
    return math.sqrt(p.low * p.high) if p.log else (p.low + p.high) / 2


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


def cross_validate(
    cases: Cases, progress: Callable[[str], None] = lambda _: None
) -> dict[str, float]:
    """The log error of each case predicted by the model fitted without its source."""
    params = parameters()
    shipped = [p.get() for p in params]
    priors = [neutral(p) for p in params]
    out: dict[str, float] = {}
    try:
        for source, train, held in folds(cases):
            for p, value in zip(params, shipped, strict=True):
                p.put(value)
            fit(train, params, priors=priors)
            out |= _predict_all(held)
            progress(f"{source}: {len(held)} run(s) predicted, fitted on {len(train)}")
    finally:
        for p, value in zip(params, shipped, strict=True):
            p.put(value)
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


def evaluate(progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    runs = load()
    serving = load("inference")
    cases: Cases = [Case(r) for r in runs] + [ServingCase(r) for r in serving]
    in_sample = _predict_all(cases)
    held_out = cross_validate(cases, progress)
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
                "measured": c.measured,
                "in_sample_error": math.exp(in_sample[run["id"]]) - 1,
                "cv_error": math.exp(held_out[run["id"]]) - 1,
            }
        )
    result: dict[str, Any] = {
        "method": "leave-one-source-out; each fold refits the constants on the other "
        "sources' calibration runs, pulled to the middle of their bounds",
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
        }
    by_regime: dict[str, dict[str, Any]] = {}
    for axis in ("framework", "scale", "precision", "bound"):
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


if __name__ == "__main__":
    main()
