"""The published runs (runs.toml) and the speed model's prediction of each.

A run is predicted through the public entry point, ``recommend`` with ``layout: given``
on the run's GPU, so the bench measures what a user asking "how long does my layout
take" gets. The search's answer at the same GPU count (``layout: search`` with
``constraints.gpu_counts`` = the run's count) is reported beside it.

    python -m bench.published             # every run, predicted vs measured
    python -m bench.published --markdown  # the tables docs/benchmarks.md quotes
    python -m bench.published --groups    # check runs' errors by source_id, framework,
                                          # GPU generation, precision and scale
"""

import json
import re
import statistics
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf.efficiency import generation
from gpuplan.core.recommend import RecommendRequest, recommend

RUNS = Path(__file__).with_name("runs.toml")

REQUIRED = ("id", "split", "source_id", "source", "quote", "measure", "value", "gpu", "gpus")
"""Fields every run carries (training runs also ``tokens_per_s_per_gpu``, ``derivation``)."""
SPLITS = ("calibration", "check")
PENDING = {
    "fsdp1": "PyTorch FSDP1 (FullyShardedDataParallel): the request says framework fsdp2, "
    "the nearest the model has, until it models FSDP1's flat-parameter all-gathers",
}
"""Why a run is kept out of the bench for now: its request cannot yet say what ran."""
SOURCE_ID = re.compile(r"^[a-z0-9][a-z0-9.-]*[a-z0-9]$")


class RunsError(ValueError):
    """runs.toml breaks a rule the bench relies on (names the run and the field)."""


def _check(runs: list[dict[str, Any]]) -> None:
    """Every run cited and complete, ids unique, its request a RecommendRequest."""
    seen: set[str] = set()
    for i, run in enumerate(runs):
        name = run.get("id", f"run #{i}")
        missing = [f for f in REQUIRED if f not in run or run[f] in ("", None)]
        if run.get("kind", "training") == "training":
            missing += [f for f in ("tokens_per_s_per_gpu", "derivation") if f not in run]
        if missing:
            raise RunsError(f"{name}: missing {', '.join(missing)}")
        if name in seen:
            raise RunsError(f"{name}: duplicate id")
        seen.add(name)
        if run["split"] not in SPLITS:
            raise RunsError(f"{name}: split {run['split']!r} is not one of {SPLITS}")
        if not SOURCE_ID.match(run["source_id"]):
            raise RunsError(f"{name}: source_id {run['source_id']!r} is not a lowercase slug")
        if "pending" in run and run["pending"] not in PENDING:
            raise RunsError(f"{name}: pending {run['pending']!r} is not one of {sorted(PENDING)}")
        if "pending" in run and run["split"] != "check":
            raise RunsError(f"{name}: a pending run cannot be a calibration run")
        if "request" not in run:
            raise RunsError(f"{name}: missing request")
        msgspec.convert(run["request"], RecommendRequest)


def load_all() -> list[dict[str, Any]]:
    """Every run of runs.toml, training and serving, pending ones included (validated)."""
    runs: list[dict[str, Any]] = tomllib.loads(RUNS.read_text(encoding="utf-8"))["run"]
    _check(runs)
    return runs


def load(kind: str = "training", pending: bool = False) -> list[dict[str, Any]]:
    """The runs of one kind the bench times: those marked ``pending`` (a framework the
    model does not have yet, PENDING) only when asked for."""
    return [
        r
        for r in load_all()
        if r.get("kind", "training") == kind and (pending or "pending" not in r)
    ]


def predict(run: dict[str, Any], layout: str = "given") -> float | None:
    """Predicted tokens/s per GPU of ``run`` (None: no plan): the training steps' rate,
    or with ``training.evaluation`` the training tokens over the time, evaluations
    included, as a loop that times both measures it."""
    body = dict(run["request"])
    if layout == "search":
        body["layout"] = "search"
        body["constraints"] = {**body["constraints"], "gpu_counts": [run["gpus"]]}
    response = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
    if not response.recommendations:
        return None
    top = response.recommendations[0]
    if top.throughput is None:
        return None
    return tokens_per_s_per_gpu(top)


def tokens_per_s_per_gpu(plan: Any) -> float:
    """A training plan's (a candidate's, or the search's option's) tokens/s per GPU as a
    run measures it: the steps' rate, or where the plan holds evaluations the training
    tokens over the whole time, as a loop that times both does (Hugging Face Trainer's
    ``train_samples_per_second``): the steps' share of the time, at their rate."""
    rate = float(plan.throughput.value / plan.count)
    if plan.evaluation_hours and plan.time_hours:
        return rate * float((plan.time_hours - plan.evaluation_hours) / plan.time_hours)
    return rate


SERVING_MEASURES = {
    "ttft_s": lambda c: c.latency.time_to_first_token_s,
    "tpot_s": lambda c: c.latency.time_per_output_token_s,
    "output_tokens_per_s": lambda c: c.latency.output_tokens_per_s,
    "requests_per_s": lambda c: c.latency.requests_per_s,
}
"""How each serving measure is read off a plan (one replica's figures)."""


def _fits(run: dict[str, Any]) -> bool:
    """Whether the memory estimate says the run's own layout fits its GPU."""
    response = recommend(msgspec.convert(run["request"], RecommendRequest), builtin_catalog())
    return bool(response.recommendations) and response.recommendations[0].fits


def predict_serving(run: dict[str, Any]) -> float | None:
    """The run's measure as the plan of its layout predicts it (None: no plan)."""
    response = recommend(msgspec.convert(run["request"], RecommendRequest), builtin_catalog())
    top = response.recommendations[0] if response.recommendations else None
    if top is None or top.latency is None:
        return None
    return float(SERVING_MEASURES[run["measure"]](top))


def error(predicted: float | None, measured: float) -> float | None:
    """Signed relative error of a prediction (+0.10: 10% faster than measured)."""
    return None if predicted is None else predicted / measured - 1


def summary(errors: list[float | None]) -> dict[str, Any]:
    known = [abs(e) for e in errors if e is not None]
    return {
        "runs": len(errors),
        "predicted": len(known),
        "median_abs_error": statistics.median(known) if known else None,
        "worst_abs_error": max(known) if known else None,
    }


def evaluate() -> dict[str, Any]:
    """Every training run at its published layout and through the search."""
    rows = []
    for run in load():
        given = predict(run)
        searched = predict(run, "search")
        fits = _fits(run)
        measured = run["tokens_per_s_per_gpu"]
        rows.append(
            {
                "id": run["id"],
                "split": run["split"],
                "gpu": run["gpu"],
                "gpus": run["gpus"],
                **regime(run),
                "measured": measured,
                "given": given,
                "given_fits": fits,
                "given_error": error(given, measured),
                "search": searched,
                "search_error": error(searched, measured),
            }
        )
    result: dict[str, Any] = {"runs": rows}
    for split in ("calibration", "check", "all"):
        chosen = [r for r in rows if split in ("all", r["split"])]
        result[split] = {
            "given": summary([r["given_error"] for r in chosen]),
            "search": summary([r["search_error"] for r in chosen]),
            # Timed as given although the memory estimate says the layout does not fit
            # (the estimator is more conservative than the framework that ran it).
            "given_not_fitting": sum(1 for r in chosen if not r["given_fits"]),
        }
    serving = []
    for run in load("inference"):
        predicted = predict_serving(run)
        serving.append(
            {
                "id": run["id"],
                "split": run["split"],
                "gpu": run["gpu"],
                "gpus": run["gpus"],
                **regime(run),
                "measure": run["measure"],
                "measured": run["value"],
                "predicted": predicted,
                "error": error(predicted, run["value"]),
            }
        )
    result["serving"] = serving
    for split in ("calibration", "check", "all"):
        chosen = [r for r in serving if split in ("all", r["split"])]
        result[f"serving_{split}"] = summary([r["error"] for r in chosen])
    result["check_groups"] = groups(
        [r for r in rows if r["split"] == "check"], "given_error", TRAINING_GROUPS
    )
    result["serving_check_groups"] = groups(
        [r for r in serving if r["split"] == "check"], "error", SERVING_GROUPS
    )
    return result


TRAINING_GROUPS = ("source_id", "framework", "generation", "precision", "scale")
SERVING_GROUPS = ("source_id", "generation", "measure")


def regime(run: dict[str, Any]) -> dict[str, str]:
    """The run's publication and the regime it tests: framework, GPU generation (the speed
    model's efficiency class of its GPU), precision and scale (GPUs <= 8, 9-128, > 128)."""
    workload = run["request"]["workload"]
    gpus = run["gpus"]
    return {
        "source_id": run["source_id"],
        "framework": workload.get("parallelism", {}).get("framework") or "unset",
        "generation": generation(builtin_catalog().get(run["gpu"])).name,
        "precision": workload.get("precision", "bf16"),
        "scale": "<=8" if gpus <= 8 else "9-128" if gpus <= 128 else ">128",
    }


def groups(rows: list[dict[str, Any]], field: str, by: tuple[str, ...]) -> dict[str, Any]:
    """Median and worst absolute error of ``rows`` grouped by each of ``by`` in turn (the
    held-out view leave-one-source-out cross-validation will report per source)."""
    result: dict[str, Any] = {}
    for key in by:
        values = sorted({str(r[key]) for r in rows})
        result[key] = {v: summary([r[field] for r in rows if str(r[key]) == v]) for v in values}
    return result


def groups_report(result: dict[str, Any]) -> str:
    """The check runs' errors by source, framework, GPU generation, precision and scale."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    lines = []
    for title, key in (
        ("training check runs, given layout", "check_groups"),
        ("serving check runs", "serving_check_groups"),
    ):
        for by, table in result[key].items():
            lines.append(f"{title}, by {by}:")
            for value, s in table.items():
                lines.append(
                    f"  {value:<48} {s['predicted']:>3} of {s['runs']:<3} median "
                    f"{pct(s['median_abs_error']):>7} worst {pct(s['worst_abs_error']):>7}"
                )
    return "\n".join(lines)


def report(result: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.1%}"

    lines = [
        f"{'run':<46} {'split':<11} {'measured':>9} {'given':>9} {'err':>7} {'search':>9} {'err':>7}"
    ]
    for r in result["runs"]:
        given = (
            "-" if r["given"] is None else f"{r['given']:,.0f}" + ("" if r["given_fits"] else "*")
        )
        search = "-" if r["search"] is None else f"{r['search']:,.0f}"
        lines.append(
            f"{r['id']:<46} {r['split']:<11} {r['measured']:>9,.0f} {given:>9} "
            f"{pct(r['given_error']):>7} {search:>9} {pct(r['search_error']):>7}"
        )
    for split in ("calibration", "check", "all"):
        s = result[split]
        lines.append(
            f"{split}: given median {s['given']['median_abs_error']:.1%} worst "
            f"{s['given']['worst_abs_error']:.1%} ({s['given']['predicted']} of "
            f"{s['given']['runs']}, {s['given_not_fitting']} not fitting the memory estimate); "
            f"search median {s['search']['median_abs_error']:.1%} worst "
            f"{s['search']['worst_abs_error']:.1%} ({s['search']['predicted']} of {s['search']['runs']} answered)"
        )
    lines.append("")
    lines.append(
        f"{'serving run':<52} {'split':<11} {'measure':<20} {'measured':>9} {'predicted':>9} {'err':>7}"
    )
    for r in result["serving"]:
        predicted = "-" if r["predicted"] is None else f"{r['predicted']:,.4g}"
        lines.append(
            f"{r['id']:<52} {r['split']:<11} {r['measure']:<20} {r['measured']:>9,.4g} "
            f"{predicted:>9} {pct(r['error']):>7}"
        )
    for split in ("calibration", "check", "all"):
        s = result[f"serving_{split}"]
        lines.append(
            f"serving {split}: median {s['median_abs_error']:.1%} worst {s['worst_abs_error']:.1%}"
        )
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    """The tables docs/benchmarks.md quotes: every run with its source and error."""
    runs = {r["id"]: r for r in [*load(), *load("inference")]}

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.1%}"

    def cite(run_id: str) -> str:
        source = str(runs[run_id]["source"])
        return source.split(",", maxsplit=1)[0].split("(", maxsplit=1)[0].strip()

    lines = [
        "| run | split | GPUs | measured tokens/s/GPU | given | error | search | error | source |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in result["runs"]:
        given = "-" if r["given"] is None else f"{r['given']:,.0f}"
        search = "-" if r["search"] is None else f"{r['search']:,.0f}"
        lines.append(
            f"| {r['id']} | {r['split']} | {r['gpus']} x {r['gpu']} | {r['measured']:,.0f} | "
            f"{given} | {pct(r['given_error'])} | {search} | {pct(r['search_error'])} | {cite(r['id'])} |"
        )
    lines += [
        "",
        "| serving run | split | GPUs | measure | measured | predicted | error | source |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in result["serving"]:
        predicted = "-" if r["predicted"] is None else f"{r['predicted']:,.4g}"
        lines.append(
            f"| {r['id']} | {r['split']} | {r['gpus']} x {r['gpu']} | {r['measure']} | "
            f"{r['measured']:,.4g} | {predicted} | {pct(r['error'])} | {cite(r['id'])} |"
        )
    return "\n".join(lines)


def run() -> dict[str, Any]:
    """Every run predicted, the table printed (to stderr under the suite)."""
    result = evaluate()
    print(report(result), file=sys.stderr)
    return result


def main() -> None:
    result = evaluate()
    if "--markdown" in sys.argv:
        print(markdown(result))
    elif "--groups" in sys.argv:
        print(groups_report(result))
    else:
        print(report(result))
    out = Path(__file__).resolve().parents[1] / "results" / "published_speed.json"
    out.write_text(json.dumps(msgspec.to_builtins(result), indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {out}\n")


if __name__ == "__main__":
    main()
