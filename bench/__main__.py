"""One entry point for the benchmarks: run some, print one table, write the results.

    python -m bench                 # the fast set
    python -m bench all             # every benchmark (what docs/benchmarks.md quotes)
    python -m bench api_overhead peers
    python -m bench api_overhead --update   # rerun one, keep the others in suite.json
    python -m bench --list
    python -m bench --table         # the table of bench/results/suite.json, running nothing

Each benchmark runs in its own interpreter under a wall-time limit (a benchmark that
overruns is reported as timed out, the others still run), on loopback only, and returns
a dict; the suite writes them together to ``bench/results/suite.json`` (the new
benchmarks, api_overhead and peers, also to their own files) and prints one table of the
figures with their goals. The modules stay runnable alone
(``python -m bench.<folder>.<name>``, e.g. ``python -m bench.speed.estimate_speed``), with
their full-size defaults and their own result files; the suite runs the bounded sizes
below. Each folder of bench/ holds the studies of one subject (bench/README.md lists
them).
"""

import argparse
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"

Row = tuple[str, str, str]  # metric, value, goal (and verdict)


@dataclass(frozen=True)
class Bench:
    target: str  # "module:function" returning a dict
    about: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 300
    fast: bool = True
    writes: str | None = None  # its own result file, when the suite's run is its standard run


BENCHMARKS: dict[str, Bench] = {
    "accuracy": Bench(
        "bench.accuracy.summary:run",
        "estimator and tracer error vs measured peaks (committed accuracy runs)",
        timeout_s=60,
    ),
    "estimate_speed": Bench(
        "bench.speed.estimate_speed:run",
        "analytic estimate, in-process, per call",
        {"calls": 100, "rounds": 9},
        timeout_s=120,
    ),
    "recommend_speed": Bench(
        "bench.speed.recommend_speed:run",
        "recommendation over the whole catalog, in-process (pure Python, the checkout's tree)",
        {"repeat": 20, "rounds": 5},
        timeout_s=180,
    ),
    "recommend_compiled": Bench(
        "bench.speed.compiled:run",
        "recommendation over the whole catalog: the compiled build (the API image's) beside "
        "the pure tree, alternating (builds it first: a C compiler)",
        {"rounds": 20, "repeat": 5},
        timeout_s=600,
        fast=False,
        writes="recommend_compiled.json",
    ),
    "published": Bench(
        "bench.published.runs:run",
        "speed model vs published training and serving runs (bench/published/runs.toml)",
        timeout_s=120,
        writes="published_speed.json",
    ),
    "speed_cv": Bench(
        "bench.published.cv:run",
        "speed model, leave-one-source-out cross-validated over the published runs",
        timeout_s=600,
        writes="speed_cv.json",
    ),
    "published_fits": Bench(
        "bench.published.fits:evaluate",
        "memory verdict on every published training run's own layout (they all ran)",
        timeout_s=600,
        writes="published_fits.json",
    ),
    "mig_packing": Bench(
        "bench.mig.mig_packing:run",
        "MIG planner vs exact MILP (HiGHS), 60 random instances + 10k-workload run",
        {"instances": 60, "seed": 7, "time_limit": 20.0},
        timeout_s=300,
    ),
    "api_overhead": Bench(
        "bench.service.api_overhead:run",
        "HTTP throughput/latency of the planning routes vs /healthz (wrk, one server)",
        {"seconds": 3.0, "rounds": 3, "connections": 32},
        timeout_s=300,
        writes="api_overhead.json",
    ),
    "peers": Bench(
        "bench.peers:run",
        "llm-analysis, accelerate, DeepSpeed vs gpuplan on measured peaks (peers venv)",
        timeout_s=600,
        fast=False,
    ),
    "trace_7b": Bench(
        "bench.trace.trace_7b:run",
        "fake-tensor trace of a Llama-2-7B AdamW step: time and peak RSS",
        {"configs": [{"dtype": "bf16", "amp": "none", "batch": 1, "seq": 4096, "runtime": "cuda"}]},
        timeout_s=300,
        fast=False,
    ),
}


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2%}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _median_worst(stats: dict[str, Any]) -> str:
    return f"{_pct(stats['median_abs_error'])} / {_pct(stats['max_abs_error'])}"


def _rows_accuracy(r: dict[str, Any]) -> list[Row]:
    a = r["analytic"]
    rows: list[Row] = [
        (
            f"analytic estimate, {a['cases']} real steps: median / worst abs error",
            _median_worst(a),
            f"median <= 5%, all <= 10% ({a['within_10pct']}/{a['cases']})",
        )
    ]
    if p := r.get("published"):
        rows.append(
            (
                f"published real-GPU figures, {p['cases']} cases: median / worst abs error",
                f"{_median_worst(p)}, most low {_pct(p['most_low'])}",
                f"median <= 5%, worst <= 15%, none > 5% low ({p['low_by_more_than_5pct']} are)",
            )
        )
    if t := r.get("traced"):
        on_same = _median_worst(r["analytic_on_traced_cases"])
        rows.append(
            (
                f"tracer, {t['cases']} of those steps: median / worst abs error",
                _median_worst(t),
                f"(analytic on the same cases: {on_same})",
            )
        )
    return rows


def _span(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def _rows_estimate(r: dict[str, Any]) -> list[Row]:
    calls = r["median_per_call"].values()
    cpu = [v["cpu_us"] for v in calls]
    wall = [v["wall_us"] for v in calls]
    return [
        (
            f"estimate, {len(cpu)} requests: CPU µs per call (min-max)",
            f"{_span(cpu, 0)} µs (wall {_span(wall, 0)})",
            f"< 100 µs: {_verdict(max(cpu) < 100)}",
        )
    ]


def _rows_recommend(r: dict[str, Any]) -> list[Row]:
    # The goal is for the default bound of 64 GPUs per job; a case that searches up to
    # thousands of GPUs is reported beside it.
    wide = [x for x in r["rows"] if "8,192" in x["case"]]
    rows = [x for x in r["rows"] if x not in wide]
    cpu = [x["median_cpu_ms"] for x in rows]
    wall = [x["median_ms"] for x in rows]
    out = [
        (
            f"recommendation over the catalog, pure Python (an editable install), {len(rows)} "
            "cases: median CPU ms (min-max)",
            f"{_span(cpu, 1)} ms (wall {_span(wall, 1)})",
            f"{sum(c < 20 for c in cpu)}/{len(cpu)} under 20 ms (the goal is the image's "
            "compiled build: recommend_compiled)",
        )
    ]
    out += [
        (
            f"recommendation, {x['case']}: median CPU ms",
            f"{x['median_cpu_ms']:.1f} ms (wall {x['median_ms']:.1f})",
            "",
        )
        for x in wide
    ]
    return out


def _rows_recommend_compiled(r: dict[str, Any]) -> list[Row]:
    # The same goal and cases as recommend_speed's, on the build the API image ships.
    rows = [x for x in r["rows"] if "8,192" not in x["case"]]
    compiled = [x["compiled_cpu_ms"] for x in rows]
    ratios = [x["ratio"] for x in rows]
    return [
        (
            f"recommendation over the catalog, compiled build (the image's), {len(rows)} cases: "
            "median CPU ms (min-max)",
            f"{_span(compiled, 1)} ms (pure tree beside it: "
            f"{_span([x['pure_cpu_ms'] for x in rows], 1)} ms; x{_span(ratios, 2)})",
            f"< 20 ms: {_verdict(max(compiled) < 20)}",
        )
    ]


def _rows_mig(r: dict[str, Any]) -> list[Row]:
    s = r["summary"]
    small, large = s["up_to_64_gpus"], s["over_64_gpus"]
    rows = [
        (
            f"MIG plan GPUs vs MILP optimum, {s['instances']} instances",
            f"{small['equal_to_milp'] + large['equal_to_milp']}/{s['milp_solved']} equal, "
            f"max gap {small['max_gap_gpus']} GPU, {s['check_errors']} check errors",
            "equal to the exact optimum",
        ),
        (
            "MIG plan time: planner / MILP median",
            f"{s['planner_s']['median'] * 1e3:.1f} ms / {s['milp_s']['median'] * 1e3:.1f} ms "
            f"(max {s['planner_s']['max'] * 1e3:.0f} / {s['milp_s']['max'] * 1e3:.0f} ms)",
            "",
        ),
    ]
    scale = r.get("scale_10k_workloads")
    if scale:
        rows.append(
            (
                "MIG plan, 10,000 workloads",
                f"{scale['gpus']} GPUs (MILP {scale['milp_gpus']}) in "
                f"{min(scale['planner_s_runs']):.2f} s (MILP {scale['milp_s']:.2f} s)",
                "",
            )
        )
    return rows


def _rows_api(r: dict[str, Any]) -> list[Row]:
    if isinstance(r.get("skipped"), str):  # the whole benchmark (no wrk)
        return [("API overhead", "skipped", r["skipped"])]
    rows: list[Row] = []
    for name, m in r["median"].items():
        goal = ""
        if name.startswith("memory estimate"):
            goal = f">= 80% of /healthz: {_verdict(m['share_of_healthz'] >= 0.8)}"
        rows.append(
            (
                f"HTTP {name}: {r['requests'][name]['method']} {r['requests'][name]['path']} "
                f"({r['load']['connections']} conns)",
                f"{m['rps']:,.0f} req/s ({m['share_of_healthz']:.0%} of /healthz), "
                f"p50 {m['p50_s'] * 1e3:.1f} ms, p99 {m['p99_s'] * 1e3:.1f} ms",
                goal,
            )
        )
    rows += [(f"HTTP {name}", "skipped", why[:80]) for name, why in r["skipped"].items()]
    return rows


def _rows_peers(r: dict[str, Any]) -> list[Row]:
    if isinstance(r.get("skipped"), str):  # no peers venv
        return [("peers", "skipped", r["skipped"])]
    rows: list[Row] = []
    for tool, s in r["summary"].items():
        rows.append(
            (
                f"{tool}: {s['cases']} training steps, median / worst abs error, time per call",
                f"{_pct(s['median_abs_error'])} / {_pct(s['max_abs_error'])}, "
                f"{s['median_us_per_call']:,.0f} µs",
                f"gpuplan on the same cases: {_pct(s['gpuplan_median_abs_error_same_cases'])}"
                if tool != "gpuplan"
                else "",
            )
        )
    rows += [
        (f"{tool}", "not installed", "") for tool, version in r["versions"].items() if not version
    ]
    return rows


def _rows_trace(r: dict[str, Any]) -> list[Row]:
    return [
        (
            f"trace Llama-2-7B {row['dtype']} b{row['batch']} s{row['seq']} ({row['runtime']})",
            f"{row['trace_seconds']:.1f} s trace ({row['process_seconds']:.1f} s process), "
            f"peak RSS {row['max_rss_bytes'] / 2**20:,.0f} MiB, traced peak {row['peak_bytes'] / 2**30:.1f} GiB",
            "",
        )
        for row in r["rows"]
    ]


def _rows_published(r: dict[str, Any]) -> list[Row]:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.1%}"

    rows: list[Row] = []
    for split in ("calibration", "check"):
        for how, goal in (("given", "median ≤ 10%, worst ≤ 25%"), ("search", "median ≤ 15%")):
            s = r[split][how]
            rows.append(
                (
                    f"training tokens/s per GPU, {split} runs, {how} layout ({s['predicted']} of {s['runs']})",
                    f"median {pct(s['median_abs_error'])}, worst {pct(s['worst_abs_error'])}",
                    goal,
                )
            )
        s = r[f"serving_{split}"]
        rows.append(
            (
                f"serving TTFT/TPOT/throughput, {split} runs ({s['predicted']} of {s['runs']})",
                f"median {pct(s['median_abs_error'])}, worst {pct(s['worst_abs_error'])}",
                "median ≤ 10%, worst ≤ 25%",
            )
        )
    return rows


def _rows_speed_cv(r: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    n = len(r["fitted_constants"])
    for kind, label in (("training", "training tokens/s per GPU"), ("inference", "serving")):
        s = r["summary"][kind]
        for how, name in (("cross_validated", "leave-one-source-out"), ("in_sample", "in-sample")):
            t = s[how]
            rows.append(
                (
                    f"{label}, {t['runs']} runs of {r['sources']} sources, {name} "
                    f"({n} fitted constants)",
                    f"median {t['median_abs_error']:.1%}, worst {t['worst_abs_error']:.1%}",
                    "median ≤ 10%, worst ≤ 35% (cross-validated)"
                    if how == "cross_validated"
                    else "",
                )
            )
    return rows


def _rows_published_fits(r: dict[str, Any]) -> list[Row]:
    s = r["summary"]
    return [
        (
            f"published training runs the memory estimate refuses at their own layout "
            f"({s['runs']} runs, every one ran)",
            f"{s['refused']} at 95% confidence, {s['refused_at_centre']} at the estimate's centre",
            "none at the centre",
        )
    ]


TABLES: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "accuracy": _rows_accuracy,
    "estimate_speed": _rows_estimate,
    "recommend_speed": _rows_recommend,
    "recommend_compiled": _rows_recommend_compiled,
    "published": _rows_published,
    "speed_cv": _rows_speed_cv,
    "published_fits": _rows_published_fits,
    "mig_packing": _rows_mig,
    "api_overhead": _rows_api,
    "peers": _rows_peers,
    "trace_7b": _rows_trace,
}


def _child(name: str, out: Path) -> None:
    """Run one benchmark in this interpreter and write its dict to ``out``."""
    bench = BENCHMARKS[name]
    module, function = bench.target.split(":")
    result = getattr(importlib.import_module(module), function)(**bench.kwargs)
    out.write_text(json.dumps(result))


def run_one(name: str) -> dict[str, Any]:
    """One benchmark in a fresh interpreter, bounded by its ``timeout_s``."""
    bench = BENCHMARKS[name]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "service"), str(ROOT), os.environ.get("PYTHONPATH")])
        ),
        "HF_HUB_OFFLINE": "1",
    }
    with tempfile.TemporaryDirectory(prefix="gpuplan-bench-") as folder:
        out = Path(folder) / "result.json"
        started = time.perf_counter()
        try:
            # the child's own progress lines go to stderr, keeping stdout for the table
            done = subprocess.run(
                [sys.executable, "-m", "bench", "--child", name, "--out", str(out)],
                cwd=ROOT,
                env=env,
                timeout=bench.timeout_s,
                stdout=sys.stderr,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {bench.timeout_s:.0f} s"}
        seconds = time.perf_counter() - started
        if done.returncode != 0 or not out.exists():
            return {"status": f"failed (exit {done.returncode})", "seconds": round(seconds, 1)}
        result = json.loads(out.read_text())
    if bench.writes:
        (RESULTS / bench.writes).write_text(json.dumps(result, indent=2) + "\n")
    if name == "mig_packing":
        result.pop("cases", None)  # 400-instance detail lives in mig_packing.json
    return {"status": "ok", "seconds": round(seconds, 1), "result": result}


def _machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def table(report: dict[str, Any]) -> str:
    """The markdown table of every finished benchmark's figures."""
    lines = ["| benchmark | metric | value | goal |", "| --- | --- | --- | --- |"]
    for name, entry in report["benchmarks"].items():
        if entry["status"] != "ok":
            lines.append(f"| {name} | — | {entry['status']} | |")
            continue
        for metric, value, goal in TABLES[name](entry["result"]):
            lines.append(f"| {name} | {metric} | {value} | {goal} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("names", nargs="*", help="benchmarks to run; 'all' for every one")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--table", action="store_true", help="print the table of the --out file; run nothing"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "suite.json")
    parser.add_argument(
        "--update",
        action="store_true",
        help="replace only these benchmarks' entries in the --out file, noting when they reran",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.out)
        return 0
    if args.table:
        print(table(json.loads(args.out.read_text())))
        return 0
    if args.list:
        for name, bench in BENCHMARKS.items():
            tag = "fast" if bench.fast else "all "
            print(f"{name:16s} {tag}  <= {bench.timeout_s:>4.0f} s  {bench.about}")
        return 0
    if args.names == ["all"]:
        names = list(BENCHMARKS)
    elif args.names:
        names = args.names
    else:
        names = [n for n, b in BENCHMARKS.items() if b.fast]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; --list shows them")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    report: dict[str, Any] = {
        "command": "python -m bench " + " ".join(args.names or []),
        "when": now,
        "machine": _machine(),
        "benchmarks": {},
    }
    if args.update and args.out.exists():
        rerun = {
            "when": now,
            "machine": report["machine"],
            "command": f"{report['command']} --update",
        }
        report = json.loads(args.out.read_text())
        report.setdefault("reruns", {}).update(dict.fromkeys(names, rerun))
    for name in names:
        print(f"== {name}", file=sys.stderr, flush=True)
        report["benchmarks"][name] = run_one(name)
    if not args.update:
        report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    return 0 if all(e["status"] == "ok" for e in report["benchmarks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
