"""The figures README.md and docs/*.md quote, written from the committed results.

    PYTHONPATH=service:. python -m bench.quote           # check: names each stale span, exit 1
    PYTHONPATH=service:. python -m bench.quote --write   # rewrite every marked span
    PYTHONPATH=service:. python -m bench.quote --list    # every figure and its text

A doc marks a figure where it states it:

    <!-- figure: accuracy.analytic -->median 0.31%, worst 4.85%<!-- /figure -->

The name is a key of ``FIGURES``, a function from the committed results
(``bench/results/*.json``, or the data file a bench reads beside them) to the text; a
name may carry one argument after a colon (``published.error:RUN_ID``). A figure whose
text has several lines (a table) sits between markers on lines of their own. So a
figure is written by this script alone, once per run of the benchmarks, and every doc
that states it shows the same text: ``tests/test_doc_figures.py`` renders each marked
span and fails, naming the doc, the span and both texts, when one differs, or when a
span names no figure.

A few figures are answers of the service rather than of a benchmark (``answer.*``: the
serving example of docs/recommendation.md, the verdicts of examples/*.yaml in
docs/ci.md): they are computed by the core from the request they show, so they follow
the model as the results follow the benchmarks.

Nothing here runs a benchmark: after ``python -m bench ...`` (or a study) rewrites a
results file, ``python -m bench.quote --write`` rewrites what the docs say of it.
"""

import argparse
import difflib
import json
import re
import statistics
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DOCS = ("README.md", "docs/*.md")

SPAN = re.compile(r"(?<!`)<!-- figure: (?P<name>[^ ]+) -->(?P<text>.*?)<!-- /figure -->", re.S)
"""A marked span; a marker right after a backtick is an example in inline code, not one."""

Figure = Callable[..., str]
FIGURES: dict[str, Figure] = {}
"""Every figure by name: a function of the results (and of its argument, if it takes one)."""


def figure(name: str) -> Callable[[Figure], Figure]:
    def register(function: Figure) -> Figure:
        assert name not in FIGURES, name
        FIGURES[name] = function
        return function

    return register


@cache
def results(file_name: str) -> Any:
    return json.loads((RESULTS / file_name).read_text(encoding="utf-8"))


def suite(name: str) -> dict[str, Any]:
    """One benchmark's result in the committed suite run (bench/results/suite.json)."""
    entry: dict[str, Any] = results("suite.json")["benchmarks"][name]
    assert entry["status"] == "ok", (name, entry["status"])
    return dict(entry["result"])


def _rows(file_name: str) -> list[dict[str, Any]]:
    return list(results(file_name)["rows"])


def pct(x: float, digits: int = 1) -> str:
    return f"{x:.{digits}%}"


def signed(x: float, digits: int = 1) -> str:
    """A signed percentage with a real minus sign, as the prose writes it."""
    return f"{x:+.{digits}%}".replace("-", "−")


def span(values: list[float], digits: int, unit: str = "") -> str:
    low, high = min(values), max(values)
    if f"{low:.{digits}f}" == f"{high:.{digits}f}":
        return f"{low:.{digits}f}{unit}"
    return f"{low:.{digits}f}-{high:.{digits}f}{unit}"


def median_worst(stats: dict[str, Any], digits: int = 2) -> str:
    worst = stats["max_abs_error"] if "max_abs_error" in stats else stats["worst_abs_error"]
    return f"median {pct(stats['median_abs_error'], digits)}, worst {pct(worst, digits)}"


# ---------------------------------------------------------------------------------------
# The suite (bench/results/suite.json): docs/benchmarks.md's table and the README


@figure("suite.table")
def _suite_table() -> str:
    from bench.__main__ import table

    return table(results("suite.json"))


@figure("suite.machine")
def _suite_machine() -> str:
    report = results("suite.json")
    m = report["machine"]
    start = m["load_average_at_start"][0]
    end = m["load_average_at_end"][0]
    kernel = ".".join(m["platform"].split("-")[1].split(".")[:2])
    arch = "x86_64" if "x86_64" in m["platform"] else m["platform"]
    trace = suite("trace_7b")
    return (
        f"`{report['command'].strip()}` at {report['when'][:16]}Z: {m['cpu']}, "
        f"**{m['cpus']} logical CPUs shared with other jobs** (load average {start} at the "
        f"start, {end} at the end), Python {m['python']}, torch {trace['torch']}, "
        f"transformers {trace['transformers']}, Linux {kernel} {arch}"
    )


@figure("suite.reruns")
def _suite_reruns() -> str:
    report = results("suite.json")
    by_command: dict[tuple[str, str], list[str]] = {}
    for name, rerun in report.get("reruns", {}).items():
        by_command.setdefault((rerun["when"], rerun["command"]), []).append(name)
    lines = [
        "| rows of | rerun by | at | load average at the start |",
        "| --- | --- | --- | ---: |",
    ]
    for (when, command), names in sorted(by_command.items()):
        load = report["reruns"][names[0]]["machine"]["load_average_at_start"][0]
        rows = ", ".join(f"`{n}`" for n in names)
        lines.append(f"| {rows} | `{command}` | {when[:16]}Z | {load} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The memory estimate's accuracy (suite: bench.accuracy.summary over accuracy*.json)


@figure("accuracy.cases")
def _accuracy_cases() -> str:
    return str(suite("accuracy")["analytic"]["cases"])


@figure("accuracy.analytic")
def _accuracy_analytic() -> str:
    return median_worst(suite("accuracy")["analytic"])


@figure("accuracy.traced_cases")
def _accuracy_traced_cases() -> str:
    return str(suite("accuracy")["traced"]["cases"])


@figure("accuracy.traced")
def _accuracy_traced() -> str:
    return median_worst(suite("accuracy")["traced"])


@figure("accuracy.published_cases")
def _accuracy_published_cases() -> str:
    return str(suite("accuracy")["published"]["cases"])


@figure("accuracy.published")
def _accuracy_published() -> str:
    return median_worst(suite("accuracy")["published"], 1)


@figure("accuracy.table")
def _accuracy_table() -> str:
    a = suite("accuracy")
    modes = {"training": "training", "inference": "inference", "finetune_lora": "LoRA"}
    rows = [
        "| against the measured peak | cases | median abs error | worst abs error |",
        "| --- | ---: | ---: | ---: |",
    ]

    def row(label: str, s: dict[str, Any], worst_case: str | None = None) -> str:
        worst = pct(s["max_abs_error"], 2) + (f" ({worst_case})" if worst_case else "")
        return f"| {label} | {s['cases']} | {pct(s['median_abs_error'], 2)} | {worst} |"

    rows.append(row("analytic estimate, all", a["analytic"], a["analytic"]["worst_case"]))
    for mode, label in modes.items():
        rows.append(row(f"analytic, {label}", a["analytic_by_mode"][mode]))
    rows.append(row("tracer", a["traced"], a["traced"]["worst_case"]))
    same = a["analytic_on_traced_cases"]
    rows.append(row(f"analytic on the tracer's {same['cases']} cases", same))
    return "\n".join(rows)


@figure("accuracy.grid")
def _accuracy_grid() -> str:
    from bench.accuracy.report import table

    return table().rstrip("\n")


@figure("accuracy.published_table")
def _accuracy_published_table() -> str:
    from bench.accuracy.published import table

    return table(results("published.json")).rstrip("\n")


@figure("accuracy.traced_summary")
def _accuracy_traced_summary() -> str:
    s = results("accuracy_traced.json")["summary"]
    return (
        f"{s['traced_cases']} of {s['cases']} cases traced, median error "
        f"{pct(s['median_abs_error'], 2)}, all {s['within_0_5pct']} within "
        f"{pct(s['max_abs_error'], 2)}"
    )


@figure("accuracy.published_error")
def _accuracy_published_error(case: str) -> str:
    row = next(r for r in results("published.json")["rows"] if r["id"] == case)
    return signed(row["error"])


@figure("accuracy.published_range")
def _accuracy_published_range(measure: str) -> str:
    rows = [
        r
        for r in results("published.json")["rows"]
        if r["measure"] == measure and not r["excluded"]
    ]
    errors = [r["error"] for r in rows]
    return f"{len(rows)} {measure} cases, {signed(min(errors))} to {signed(max(errors))}"


@figure("accuracy.vision")
def _accuracy_vision(model: str) -> str:
    row = next(r for r in _rows("accuracy_vision.json") if r["case"].startswith(model))
    mib = 2**20
    return (
        f"measured {row['measured_bytes'] / mib:.1f} MiB, estimated "
        f"{row['estimated_bytes'] / mib:.1f} MiB ({signed(row['error'])})"
    )


@figure("accuracy.megatron_tool")
def _accuracy_megatron_tool() -> str:
    lines = [
        "| layout | measured GiB | estimated GiB | error | with the legacy terms | error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in _rows("megatron_tool.json"):
        lines.append(
            f"| {r['layout']} | {r['measured_gib']} | {r['estimated_gib']:.2f} | "
            f"{r['error']:+.1%} | {r['with_legacy_terms_gib']:.2f} | {r['legacy_error']:+.1%} |"
        )
    return "\n".join(lines)


@figure("accuracy.megatron_tool_legacy")
def _accuracy_megatron_tool_legacy() -> str:
    return pct(max(abs(r["legacy_error"]) for r in _rows("megatron_tool.json")))


# ---------------------------------------------------------------------------------------
# The service as deployed (fuzz.json, load.json, asgi_servers.json, api_memory.json)


@figure("fuzz.summary")
def _fuzz_summary() -> str:
    d = results("fuzz.json")
    verdict = "every check passed" if d["exit_code"] == 0 and not d["failures"] else "checks failed"
    return (
        f"all {d['tests']['passed']} operations of the spec, {d['examples_per_operation']:,} "
        f"examples each ({d['trace_examples']} for the trace), {verdict} in {d['seconds']:.0f} s"
    )


@figure("load.summary")
def _load_summary() -> str:
    d = results("load.json")
    lat = d["latency"]
    rss = d["rss_bytes"]
    load = d["load_average_1m"]
    return (
        f"{d['requests']:,} requests, **{d['errors']} errors**, "
        f"{d['requests_per_second_after_warmup']:.0f} requests/s after the "
        f"{d['warmup_seconds']:.0f} s warm-up, p50 {lat['p50_ms']:.0f} ms, p99 "
        f"{lat['p99_ms']:.0f} ms, max {lat['max_ms'] / 1000:.1f} s (load average "
        f"{load['start']} → {load['end']}, the client on the same two cores); resident memory "
        f"{rss['after_warmup'] / 1e6:.1f} MB after the warm-up, {rss['end'] / 1e6:.1f} MB at the "
        f"end (**{signed(d['rss_growth_after_warmup'], 2).replace('−', '-')}**)"
    )


@figure("load.little")
def _load_little() -> str:
    d = results("load.json")
    rate = d["requests_per_second_after_warmup"]
    return (
        f"{d['concurrency']} requests in flight at {rate:.0f}/s is "
        f"{d['concurrency'] / rate * 1000:.0f} ms by Little's law"
    )


def _asgi() -> dict[str, Any]:
    return dict(results("asgi_servers.json"))


@figure("asgi.table")
def _asgi_table() -> str:
    m = _asgi()["median"]
    labels = {
        ("granian", "/healthz"): "granian `--interface asgi --loop uvloop`",
        ("uvicorn", "/healthz"): "uvicorn `--loop uvloop --http httptools`",
    }
    lines = [
        "| server | path | req/s (median) | p50 | p99 | non-2xx |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for server, paths in m.items():
        for path, r in paths.items():
            lines.append(
                f"| {labels.get((server, path), server)} | `{path}` | {r['rps']:,.0f} | "
                f"{r['p50_s'] * 1000:.1f} ms | {r['p99_s'] * 1000:.1f} ms | {r['non_2xx']:.0f} |"
            )
    return "\n".join(lines)


@figure("asgi.ratio")
def _asgi_ratio(path: str) -> str:
    m = _asgi()["median"]
    key = "/" + path.replace("_", "/")
    return f"{m['granian'][key]['rps'] / m['uvicorn'][key]['rps']:.2f}×"


@figure("asgi.rounds")
def _asgi_rounds() -> str:
    samples = _asgi()["samples"]

    def rounds(server: str) -> str:
        rps = [r["rps"] for path in samples[server].values() for r in path]
        return f"{min(rps):,.0f}–{max(rps):,.0f} req/s"

    return f"granian {rounds('granian')}, uvicorn {rounds('uvicorn')}"


def _api_memory(workers: int) -> dict[str, Any]:
    return next(r for r in results("api_memory.json")["runs"] if r["workers"] == workers)


@figure("api_memory.summary")
def _api_memory_summary() -> str:
    one, two = _api_memory(1), _api_memory(2)
    return (
        f"{one['pod_peak_rss_mib']:.0f} MiB with one worker, {two['pod_peak_rss_mib']:.0f} MiB "
        f"with two ({two['parent_peak_rss_mib']:.0f} MiB granian parent + "
        f"{max(two['worker_peak_rss_mib']):.0f} MiB a worker"
    )


@figure("api_memory.worker")
def _api_memory_worker() -> str:
    return f"{max(_api_memory(2)['worker_peak_rss_mib']):.0f} MiB"


# ---------------------------------------------------------------------------------------
# The agent (agent_gpu.json on an H200, agent_cpu.json here)


@figure("agent_gpu.run")
def _agent_gpu_run() -> str:
    d = results("agent_gpu.json")
    return (
        f"the agent exited {d['agent_exit_code']} in {d['agent_wall_seconds']:.1f} s, its "
        f"benchmark child took {d['benchmark_seconds']:.1f} s, status `{d['benchmark_status']}`"
    )


@figure("agent_gpu.table")
def _agent_gpu_table() -> str:
    names = {"fp32": "fp32 (TF32 off)", "fp8": "fp8 (e4m3, `_scaled_mm`)"}
    lines = [
        "| dtype (8192³) | median TFLOP/s | fastest call | catalog dense peak | median / peak |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results("agent_gpu.json")["matmul"]:
        lines.append(
            f"| {names.get(r['dtype'], r['dtype'])} | {r['achieved_tflops_median']:,.1f} | "
            f"{r['achieved_tflops_best']:,.1f} | {r['peak_tflops']:,.1f} | {r['ratio_to_peak']:.3f} |"
        )
    return "\n".join(lines)


@figure("agent_gpu.bf16")
def _agent_gpu_bf16() -> str:
    r = next(r for r in results("agent_gpu.json")["matmul"] if r["dtype"] == "bf16")
    return (
        f"the median call ran at {r['achieved_tflops_median']:.0f} TFLOP/s, "
        f"the fastest at {r['achieved_tflops_best']:.0f}"
    )


@figure("agent_gpu.copies")
def _agent_gpu_copies() -> str:
    copies = {c["kind"]: c for c in results("agent_gpu.json")["copy"]}
    h2d, d2h = copies["h2d"], copies["d2h"]
    return (
        f"host→device {h2d['gb_per_second']:.1f} GB/s and device→host "
        f"{d2h['gb_per_second']:.1f} GB/s over PCIe Gen 5 ×16, "
        f"{min(h2d['ratio_to_peak'], d2h['ratio_to_peak']):.2f} of the catalog's rate per direction"
    )


@figure("agent_gpu.nvml")
def _agent_gpu_nvml() -> str:
    answered = results("agent_gpu.json")["nvml_functions_answered"]
    queries = [f for f in answered if f not in ("nvmlInit", "nvmlShutdown")]
    return f"{len(queries)} query functions answered"


@figure("agent_cpu.table")
def _agent_cpu_table() -> str:
    lines = [
        "| size, threads | `--once` wall | fp64 | fp32 | bf16 | fp16 | host memcpy |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]

    def rate(x: float) -> str:
        return f"{x:.1f}" if x < 10 else f"{x:.0f}"

    for r in _rows("agent_cpu.json"):
        threads = "all" if r["cpu_threads"] == 0 else str(r["cpu_threads"])
        g = r["matmul_gflops_per_second_median"]
        lines.append(
            f"| {r['cpu_matmul_size']}³, {threads} | {r['wall_seconds_median']:.1f} s | "
            + " | ".join(f"{rate(g[d])} GFLOP/s" for d in ("fp64", "fp32", "bf16", "fp16"))
            + f" | {r['host_memcpy_gb_per_second_median']:.1f} GB/s |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Speed of the core (suite: estimate_speed, recommend_speed, mig_packing, trace_7b)


def _estimates() -> dict[str, dict[str, float]]:
    return dict(suite("estimate_speed")["median_per_call"])


@figure("estimate.range")
def _estimate_range() -> str:
    return span([v["cpu_us"] for v in _estimates().values()], 0, " µs")


@figure("estimate.per_request")
def _estimate_per_request() -> str:
    parts = []
    for name, v in _estimates().items():
        cold = v["cold_us"]
        first = f"{cold / 1000:.1f} ms" if cold >= 1000 else f"{cold:.0f} µs"
        parts.append(f"{name} {v['cpu_us']:.0f} µs / {first}")
    return "; ".join(parts)


@figure("estimate.goal")
def _estimate_goal() -> str:
    cpu = [v["cpu_us"] for v in _estimates().values()]
    return f"{sum(c < 100 for c in cpu)} of the {len(cpu)}"


def _wide_apart(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the goal's cases, at the default bound of 64 GPUs; the 8,192-GPU one) of a
    recommendation speed run."""
    wide = [r for r in rows if "8,192" in r["case"]]
    return [r for r in rows if r not in wide], wide


def _recommend_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return _wide_apart(suite("recommend_speed")["rows"])


@figure("recommend.range")
def _recommend_range() -> str:
    rows, _ = _recommend_rows()
    return span([r["median_cpu_ms"] for r in rows], 1, " ms")


@figure("recommend.cases")
def _recommend_cases() -> str:
    rows, _ = _recommend_rows()
    return str(len(rows))


@figure("recommend.gpus")
def _recommend_gpus() -> str:
    rows, _ = _recommend_rows()
    return str(rows[0]["gpus"])


@figure("recommend.wide")
def _recommend_wide() -> str:
    _, wide = _recommend_rows()
    return span([r["median_cpu_ms"] for r in wide], 1, " ms")


@figure("recommend.case")
def _recommend_case(word: str) -> str:
    """One case's median CPU time, the case named by a word of it (``lora``)."""
    (row,) = [r for r in suite("recommend_speed")["rows"] if word.lower() in r["case"].lower()]
    return f"{row['median_cpu_ms']:.1f} ms"


@figure("recommend.reference")
def _recommend_reference() -> str:
    """The run's reference loop (3 million Python additions), CPU ms."""
    return f"{suite('recommend_speed')['reference_loop_cpu_ms']:.0f} ms"


@figure("recommend.goal")
def _recommend_goal() -> str:
    rows, _ = _recommend_rows()
    under = sum(r["median_cpu_ms"] < 20 for r in rows)
    if under == len(rows):
        return "under the 20 ms goal"
    return f"the 20 ms goal met by {under} of the {len(rows)}"


def _compiled_rows() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return _wide_apart(results("recommend_compiled.json")["rows"])


@figure("recommend_compiled.table")
def _recommend_compiled_table() -> str:
    rows, wide = _compiled_rows()
    lines = ["| case | pure Python | compiled | ratio |", "| --- | ---: | ---: | ---: |"]
    for r in [*rows, *wide]:
        lines.append(
            f"| {r['case']} | {r['pure_cpu_ms']:.2f} | {r['compiled_cpu_ms']:.2f} | {r['ratio']:.2f} |"
        )
    return "\n".join(lines)


@figure("recommend_compiled.range")
def _recommend_compiled_range() -> str:
    rows, _ = _compiled_rows()
    return span([r["compiled_cpu_ms"] for r in rows], 1, " ms")


@figure("recommend_compiled.pure")
def _recommend_compiled_pure() -> str:
    rows, _ = _compiled_rows()
    return span([r["pure_cpu_ms"] for r in rows], 1, " ms")


@figure("recommend_compiled.ratio")
def _recommend_compiled_ratio() -> str:
    rows, _ = _compiled_rows()
    return span([r["ratio"] for r in rows], 2, "×")


@figure("recommend_compiled.goal")
def _recommend_compiled_goal() -> str:
    rows, _ = _compiled_rows()
    under = sum(r["compiled_cpu_ms"] < 20 for r in rows)
    if under == len(rows):
        return f"all {len(rows)} under the 20 ms goal"
    return f"the 20 ms goal met by {under} of the {len(rows)}"


@figure("recommend_compiled.reference")
def _recommend_compiled_reference() -> str:
    """The compiled run's reference loop (3 million Python additions), CPU ms."""
    return f"{results('recommend_compiled.json')['reference_loop_cpu_ms']:.0f} ms"


@figure("recommend_compiled.over")
def _recommend_compiled_over() -> str:
    """The goal's cases over 20 ms in the compiled build, with their figures."""
    rows, _ = _compiled_rows()
    over = [
        f"{r['case']} ({r['compiled_cpu_ms']:.1f} ms)" for r in rows if r["compiled_cpu_ms"] >= 20
    ]
    return "; ".join(over) if over else "none"


@figure("recommend_compiled.modules")
def _recommend_compiled_modules() -> str:
    return str(len(results("recommend_compiled.json")["compiled_modules"]))


@figure("recommend_compiled.instructions")
def _recommend_compiled_instructions() -> str:
    rows = results("recommend_instructions_compiled.json")["rows"]
    slowest = max(rows, key=lambda r: r["before_minstr"] if "8,192" not in r["case"] else 0)
    ratios = span([r["ratio"] for r in rows], 2, "×")
    return (
        f"{ratios} of the pure tree's per case; the slowest pure case, "
        f"{slowest['case']}, {slowest['before_minstr']:.1f} -> {slowest['after_minstr']:.1f} M"
    )


@figure("recommend_ab.table")
def _recommend_ab_table() -> str:
    ab = results("recommend_ab.json")
    lines = ["| case | before | after | ratio |", "| --- | ---: | ---: | ---: |"]
    for r in ab["rows"]:
        lines.append(
            f"| {r['case']} | {r['before_cpu_ms']:.2f} | {r['after_cpu_ms']:.2f} | {r['ratio']:.2f} |"
        )
    return "\n".join(lines)


def _ab_split(name: str = "recommend_ab.json") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the training cases under fastest or balanced, which the best-first count walk and
    its cheap key change; every other case) of the A/B in ``name``."""
    rows = results(name)["rows"]
    serving = [r for r in rows if "inference" in r["case"] or "serving" in r["case"]]
    walked = [
        r for r in rows if r not in serving and ("fastest" in r["case"] or "balanced" in r["case"])
    ]
    return walked, [r for r in rows if r not in walked]


@figure("recommend_ab.walked")
def _recommend_ab_walked() -> str:
    walked, _ = _ab_split()
    ratios = span([r["ratio"] for r in walked], 2, "×")
    after = span([r["after_cpu_ms"] for r in walked], 1, " ms")
    return f"{ratios} as much ({after} a request)"


@figure("recommend_ab.rest")
def _recommend_ab_rest() -> str:
    _, rest = _ab_split()
    return span([r["ratio"] for r in rest], 2, "×") + " as much"


@figure("recommend_instructions.table")
def _recommend_instructions_table() -> str:
    """Instructions per request under two trees (bench/speed/recommend_instructions.py)."""
    r = results("recommend_instructions.json")
    rows = ["| case | before | after | ratio |", "| --- | ---: | ---: | ---: |"]
    for x in r["rows"]:
        rows.append(
            f"| {x['case']} | {x['before_minstr']:.1f} M | {x['after_minstr']:.1f} M | {x['ratio']:.3f} |"
        )
    return "\n".join(rows)


@figure("recommend_ab_shares.walked")
def _recommend_ab_shares_walked() -> str:
    walked, rest = _ab_split("recommend_ab_shares.json")
    return (
        f"{span([r['ratio'] for r in walked], 2, '×')} as much on the training cases under "
        f"`fastest` and `balanced`, {span([r['ratio'] for r in rest], 2, '×')} on the rest"
    )


@figure("recommend_ab_slo.slo")
def _recommend_ab_slo() -> str:
    rows = results("recommend_ab_slo.json")["rows"]

    def ms(r: dict[str, Any]) -> str:
        return f"{r['before_cpu_ms']:.1f} -> {r['after_cpu_ms']:.1f} ms (×{r['ratio']:.2f})"

    slo = next(r for r in rows if "p95 SLO" in r["case"])
    tpot = next(r for r in rows if "TPOT target 50 ms" in r["case"])
    disagg = next(r for r in rows if "disaggregated" in r["case"])
    rest = [r["ratio"] for r in rows if r not in (slo, tpot, disagg)]
    return (
        f"{ms(slo)}, the TPOT target {ms(tpot)}, the disaggregated comparison {ms(disagg)}; "
        f"the cases the changes do not touch, {span(rest, 2, '×')}"
    )


@figure("mig.suite")
def _mig_suite() -> str:
    s = suite("mig_packing")["summary"]
    equal = s["up_to_64_gpus"]["equal_to_milp"] + s["over_64_gpus"]["equal_to_milp"]
    return f"{equal} of {s['instances']}"


# ---------------------------------------------------------------------------------------
# The HTTP service (suite: api_overhead, the same run as bench/results/api_overhead.json)


def _api() -> dict[str, Any]:
    return dict(suite("api_overhead")["median"])


@figure("api.estimate_repeated")
def _api_estimate_repeated() -> str:
    m = _api()
    e, h = m["memory estimate"], m["healthz"]
    return f"{e['share_of_healthz']:.0%} of `/healthz`'s rate ({e['rps']:,.0f} against {h['rps']:,.0f} req/s)"


@figure("api.estimate_computed")
def _api_estimate_computed() -> str:
    e = _api()["memory estimate, computed"]
    return f"{e['share_of_healthz']:.0%} ({e['rps']:,.0f} req/s)"


API_ROWS = {
    "estimate": "memory estimate",
    "estimate_computed": "memory estimate, computed",
    "recommendations": "recommendations",
    "recommendations_computed": "recommendations, computed",
    "mig_plan": "mig plan",
    "mig_plan_computed": "mig plan, computed",
    "plan": "plan",
}
"""The api_overhead rows a figure may name, by a name without spaces."""


@figure("api.share")
def _api_share(row: str) -> str:
    return f"{_api()[API_ROWS[row]]['share_of_healthz']:.0%}"


@figure("api.planning_share")
def _api_planning_share() -> str:
    m = _api()
    names = ["recommendations, computed", "mig plan, computed", "plan"]
    shares = [m[n]["share_of_healthz"] * 100 for n in names]
    return span(shares, 0, "%")


@figure("api.healthz_us")
def _api_healthz_us() -> str:
    return f"{1e6 / _api()['healthz']['rps']:.0f} µs"


@figure("api.budget_us")
def _api_budget_us() -> str:
    goal = suite("api_overhead")["goal"]["estimate_share_of_healthz"]
    return f"{1e6 / _api()['healthz']['rps'] * (1 / goal - 1):.0f} µs"


@figure("api.core_estimate_us")
def _api_core_estimate_us() -> str:
    return f"{suite('api_overhead')['in_process']['core_estimate_inside_app_us']['median']:.0f} µs"


@figure("api.in_process")
def _api_in_process() -> str:
    p = suite("api_overhead")["in_process"]
    core = p["core_estimate_inside_app_us"]
    rows = [
        ("`GET /healthz`", f"{p['healthz_us']:.0f}"),
        (
            "`POST /v1/memory/estimate`, repeated (answered by the answer cache layer: body "
            "read, one lookup, metrics, security headers)",
            f"{p['estimate_repeated_us']:.0f}",
        ),
        (
            "`POST /v1/memory/estimate` with the cache off and the core's answer stubbed (the "
            "framework's floor for this POST: body read, strict decode and validation, answer "
            "encode and JSON-safety screen, response, metrics, security headers)",
            f"{p['estimate_core_stubbed_us']:.0f}",
        ),
        ("`POST /v1/memory/estimate` with the cache off, computed", f"{p['estimate_us']:.0f}"),
        (
            "the core `estimate` call inside the app: median / p99",
            f"{core['median']:.0f} / {core['p99']:.0f}",
        ),
    ]
    lines = ["| in-process, per request | µs |", "| --- | ---: |"]
    lines += [f"| {what} | {us} |" for what, us in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The speed model against published runs (published_speed.json, = the suite's `published`)
# and its cross-validation (speed_cv.json)


def _published() -> dict[str, Any]:
    return dict(results("published_speed.json"))


@figure("published.summary")
def _published_summary() -> str:
    r = _published()

    def mw(s: dict[str, Any]) -> str:
        worst = s["worst_abs_error"]
        return f"{pct(s['median_abs_error'])} / {pct(worst) if worst < 1 else f'{worst:.0%}'}"

    lines = [
        "| | given layout: median / worst | search at the same count: median / worst |",
        "| --- | --- | --- |",
    ]
    for split, label in (("calibration", "calibration runs"), ("check", "check runs"), ("all", "")):
        s = r[split]
        name = (
            f"training, {s['given']['runs']} {label}"
            if label
            else f"training, all {s['given']['runs']}"
        )
        lines.append(
            f"| {name} | {mw(s['given'])} | {mw(s['search'])} ({s['search']['predicted']} answered) |"
        )
    for split, label in (("calibration", "calibration runs"), ("check", "check runs"), ("all", "")):
        s = r[f"serving_{split}"]
        name = f"serving, {s['runs']} {label}" if label else f"serving, all {s['runs']}"
        lines.append(f"| {name} | {mw(s)} | |")
    return "\n".join(lines)


@figure("published.runs")
def _published_runs() -> str:
    from bench.published.runs import markdown

    return markdown(_published())


@figure("published.not_fitting")
def _published_not_fitting() -> str:
    s = _published()["all"]
    return f"{s['given_not_fitting']} of the {s['given']['runs']}"


@figure("published.search_unanswered")
def _published_search_unanswered() -> str:
    rows = _published()["runs"]
    return str(sum(1 for r in rows if r["search"] is None and not r["given_fits"]))


@figure("published_fits.runs")
def _published_fits_runs() -> str:
    return str(results("published_fits.json")["summary"]["runs"])


@figure("published_fits.refused")
def _published_fits_refused() -> str:
    return str(results("published_fits.json")["summary"]["refused"])


@figure("published_fits.refused_at_centre")
def _published_fits_refused_at_centre() -> str:
    return str(results("published_fits.json")["summary"]["refused_at_centre"])


def _run(run_id: str) -> dict[str, Any]:
    r = _published()
    for row in r["runs"]:
        if row["id"] == run_id:
            return {**row, "error": row["given_error"]}
    for row in r["serving"]:
        if row["id"] == run_id:
            return dict(row)
    raise KeyError(f"no published run {run_id!r}")


@figure("published.error")
def _published_error(run_id: str) -> str:
    """A run's error at its given layout (serving: of its measure), rounded as prose."""
    return signed(_run(run_id)["error"], 0)


@figure("published.worst")
def _published_worst(kind: str) -> str:
    """The three runs furthest off at their given layout (training) or measure (serving)."""
    r = _published()
    rows = r["runs"] if kind == "training" else r["serving"]
    key = "given_error" if kind == "training" else "error"
    known = [x for x in rows if x[key] is not None]
    worst = sorted(known, key=lambda x: -abs(x[key]))[:3]
    return ", ".join(f"`{x['id']}` ({x['split']}, {signed(x[key], 0)})" for x in worst)


@figure("published.check_groups")
def _published_check_groups(kind: str) -> str:
    """The check runs' errors by source (``python -m bench.published --groups``)."""
    key = "check_groups" if kind == "training" else "serving_check_groups"
    table = _published()[key]["source_id"]
    lines = ["| source | runs | median / worst abs error |", "| --- | ---: | ---: |"]
    for source, g in sorted(table.items(), key=lambda x: -(x[1]["median_abs_error"] or 0)):
        if g["median_abs_error"] is None:
            lines.append(f"| {source} | 0 of {g['runs']} | - |")
            continue
        worst = g["worst_abs_error"]
        lines.append(
            f"| {source} | {g['predicted']} of {g['runs']} | "
            f"{pct(g['median_abs_error'])} / {pct(worst) if worst < 1 else f'{worst:.0%}'} |"
        )
    return "\n".join(lines)


@figure("published.serving_engines")
def _published_serving_engines() -> str:
    """The worst error of the current serving engines (NIM, SGLang), rounded up."""
    rows = [r for r in _published()["serving"] if r["id"].startswith(("nim", "sglang"))]
    worst = max(abs(r["error"]) for r in rows)
    return f"{-(-worst * 100 // 1):.0f}%"


@figure("published.serving_static")
def _published_serving_static() -> str:
    """The range of the static-batching stacks' errors (DeepSpeed-Inference at batch 128,
    FasterTransformer on four A100s)."""
    ids = [
        "hfblog-bloom176b-8xa100-dsinference-fp16-bs128",
        "databricks-mpt7b-4xa100-static-bs128-512in64out",
    ]
    errors = [abs(_run(i)["error"]) * 100 for i in ids]
    return span(errors, 0, "%")


@figure("fit.charge")
def _fit_charge() -> str:
    """How the fit charges a run far off (bench/published/fit.py's constants)."""
    import math

    from bench.published.fit import EXCESS_WEIGHT, TOLERANCE

    times = {1.0: "once", 2.0: "twice", 3.0: "three times", 4.0: "four times"}
    over = times.get(EXCESS_WEIGHT, f"{EXCESS_WEIGHT:g} times")
    return (
        f"a run's log error beyond {TOLERANCE:g} (about {math.exp(TOLERANCE) - 1:.0%}) "
        f"charged again {over} over"
    )


@figure("published.check_sharing")
def _published_check_sharing() -> str:
    """How many check runs come from a source some calibration run also comes from."""
    from bench.published.runs import load

    runs = load() + load("inference")

    def source(run: dict[str, Any]) -> str:
        return str(run["source_id"])

    fitted = {source(r) for r in runs if r["split"] == "calibration"}
    checks = [r for r in runs if r["split"] == "check"]
    return f"{sum(source(r) in fitted for r in checks)} of the {len(checks)}"


def _cv() -> dict[str, Any]:
    return dict(results("speed_cv.json"))


@figure("kernels.tables")
def _kernels_tables() -> str:
    """The measured kernel tables the package ships (core/perf/data/kernels, written by
    bench/kernels/derive.py): which GPUs, from which collection."""
    folder = ROOT / "service" / "gpuplan" / "core" / "perf" / "data" / "kernels"
    rows = [
        "| catalog GPU | device as collected | engine | GEMM dtypes | cells filled / enveloped |",
        "| --- | --- | --- | --- | --- |",
    ]
    for path in sorted(folder.glob("*.json")):
        t = json.loads(path.read_text("utf-8"))
        g = t["provenance"]["gemm"]
        rows.append(
            f"| {', '.join(f'`{i}`' for i in t['catalog_ids'])} | {t['device']} | "
            f"{g['engine']} {g['engine_version']} | {', '.join(t['gemm'])} | "
            f"{g['filled_cells']} / {g['enveloped_cells']} |"
        )
    return "\n".join(rows)


@figure("speed_cv.constants")
def _speed_cv_constants() -> str:
    return f"{len(_cv()['fitted_constants'])} fitted constants"


@figure("speed_cv.sources")
def _speed_cv_sources() -> str:
    return f"{_cv()['sources']} sources"


@figure("speed_cv.table")
def _speed_cv_table() -> str:
    s = _cv()["summary"]
    lines = [
        "| runs | in-sample (shipped constants) | leave-one-source-out | 80% intervals holding the measure |",
        "| --- | --- | --- | --- |",
    ]
    for kind, label in (("training", "training"), ("inference", "serving")):
        k = s[kind]
        lines.append(
            f"| {label}, {k['in_sample']['runs']} | {median_worst(k['in_sample'], 1)} | "
            f"{median_worst(k['cross_validated'], 1)} | {k['intervals']['inside']} of "
            f"{k['intervals']['runs']} |"
        )
    return "\n".join(lines)


@figure("speed_cv.summary")
def _speed_cv_summary(kind: str) -> str:
    """One kind's in-sample and cross-validated errors, labelled, for the README."""
    s = _cv()["summary"][kind]
    return (
        f"in-sample (the shipped constants, fitted to the calibration runs among them) "
        f"{median_worst(s['in_sample'], 1)}; "
        f"leave-one-source-out cross-validated {median_worst(s['cross_validated'], 1)}"
    )


@figure("speed_cv.runs")
def _speed_cv_runs(kind: str) -> str:
    return str(_cv()["summary"][kind]["in_sample"]["runs"])


MEASURE_NAMES = {
    "output_tokens_per_s": "output tokens/s",
    "ttft_s": "time to first token",
    "tpot_s": "time per output token",
    "requests_per_s": "requests/s",
}


@figure("speed_cv.serving_by_measure")
def _speed_cv_serving_by_measure() -> str:
    """Serving's errors per measure, in-sample and cross-validated, with the share of
    runs inside their 80% interval (issue 34's targets are per measure)."""
    table = _cv()["summary"]["inference"]["by_measure"]
    lines = [
        "| serving measure | runs | in-sample median | leave-one-source-out median | 80% intervals holding it |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for measure, m in table.items():
        i = m["intervals"]
        lines.append(
            f"| {MEASURE_NAMES.get(measure, measure)} | {m['cross_validated']['runs']} | "
            f"{pct(m['in_sample']['median_abs_error'])} | "
            f"{pct(m['cross_validated']['median_abs_error'])} | {i['inside']} of {i['runs']} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# AIConfigurator beside gpuplan on the serving runs (peers_serving.json)


def _ps() -> dict[str, Any]:
    return dict(results("peers_serving.json"))


@figure("peers_serving.coverage")
def _peers_serving_coverage() -> str:
    r = _ps()
    return f"{r['covered']} of the {r['serving_runs']} serving runs"


@figure("peers_serving.versions")
def _peers_serving_versions() -> str:
    v = _ps()["versions"]
    return f"AIConfigurator {v['aiconfigurator']} (aiconfigurator-core {v['aiconfigurator_core']})"


@figure("peers_serving.table")
def _peers_serving_table() -> str:
    """Median absolute error of each tool on the runs both answered, by measure and mode."""
    s = _ps()["summary"]
    lines = [
        "| runs | n | AIConfigurator | gpuplan, cross-validated | gpuplan, in-sample | AIConfigurator closer |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    modes = {"static": "static batch", "agg": "in-flight batching under load"}
    groups = [("all", s["all"])]
    groups += [(MEASURE_NAMES.get(k, k), b) for k, b in s["by_measure"].items()]
    groups += [(modes.get(k, k), b) for k, b in s["by_mode"].items()]
    groups += [(f"`{k}`", b) for k, b in s["by_source"].items()]
    for label, b in groups:
        if not b["runs"]:
            continue
        lines.append(
            f"| {label} | {b['runs']} | {pct(b['aiconfigurator'])} | "
            f"{pct(b['gpuplan_cross_validated'])} | {pct(b['gpuplan_in_sample'])} | "
            f"{b['aiconfigurator_closer']} of {b['runs']} |"
        )
    return "\n".join(lines)


@figure("peers_serving.rows")
def _peers_serving_rows() -> str:
    """Every covered run: measured, each tool's signed error."""
    lines = [
        "| run | GPU | measure | mode, sequences | measured | AIConfigurator | gpuplan (cv) |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for r in _ps()["rows"]:
        aic = signed(r["aic_error"], 0) if r["aic_error"] is not None else "no answer"
        cv = signed(r["cv_error"], 0) if r["cv_error"] is not None else "-"
        used = r.get("aic_batch_size_used")
        batch = f"{r['batch_size']}" + (
            f" (AIConfigurator: {used} fit)" if used and used != r["batch_size"] else ""
        )
        lines.append(
            f"| `{r['id']}` | {r['gpus']} x {r['gpu']} | {MEASURE_NAMES.get(r['measure'], r['measure'])} | "
            f"{r['mode']}, {batch} | {r['measured']:,.4g} | {aic} | {cv} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# The memory estimate's intervals (memory_intervals.json)


def _mi() -> dict[str, Any]:
    return dict(results("memory_intervals.json"))


@figure("memory_intervals.corpus")
def _memory_intervals_corpus() -> str:
    r = _mi()
    return f"{r['cases']} counted peak, reserve and `nvidia-smi` figures of {r['sources']} publications"


@figure("memory_intervals.errors")
def _memory_intervals_errors() -> str:
    r = _mi()
    return (
        f"median {pct(r['median_abs_error'])}, signed {signed(r['median_error'])}, worst "
        f"{signed(r['worst_low'])} low and {signed(r['worst_high'])} high"
    )


@figure("memory_intervals.judged")
def _memory_intervals_judged() -> str:
    r = _mi()
    i, s = r["intervals"], r["in_sample_intervals"]
    return (
        f"Leave-one-source-out, the high end is at or above the measure on "
        f"{i['high_at_or_above_measure']} of {i['cases']} cases (target: 90%); its median "
        f"overshoot is {signed(i['median_overshoot'])} (target: at most 15%); the point "
        f"estimate is more than 5% low on {i['point_more_than_5pct_low']} of them "
        f"({pct(i['share_more_than_5pct_low'], 0)}; target: at most 10%). In-sample (every "
        f"case, the case's own publication's included): {s['high_at_or_above_measure']} "
        f"of {s['cases']}, overshoot {signed(s['median_overshoot'])}"
    )


@figure("memory_intervals.judged_short")
def _memory_intervals_judged_short() -> str:
    i = _mi()["intervals"]
    return (
        f"its 90% high end at or above the measure on {i['high_at_or_above_measure']} of "
        f"{i['cases']}, median overshoot {signed(i['median_overshoot'])}, the point more "
        f"than 5% low on {pct(i['share_more_than_5pct_low'], 0)} of them"
    )


@figure("memory_intervals.alternative")
def _memory_intervals_alternative() -> str:
    a = _mi()["alternative"]
    return (
        f"the high end at or above the measure on {pct(a['share_covered'], 0)} of the cases, "
        f"median overshoot {signed(a['median_overshoot'])}"
    )


@figure("memory_intervals.by_regime")
def _memory_intervals_by_regime() -> str:
    r = _mi()
    lines = [
        "| regime | cases | sources | median error | >5% low | high ≥ measure | "
        "median overshoot (cv) | overshoot in-sample |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    groups = [("all", r["intervals"], r["in_sample_intervals"])] + [
        (g, j["cross_validated"], j["in_sample"]) for g, j in r["by_regime"].items()
    ]
    for name, cv, ins in groups:
        lines.append(
            f"| {name} | {cv['cases']} | {cv['sources']} | {pct(cv['median_abs_error'])} | "
            f"{pct(cv['share_more_than_5pct_low'], 0)} | {pct(cv['share_covered'], 0)} | "
            f"{signed(cv['median_overshoot'])} | {signed(ins['median_overshoot'])} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# Peers (peers.json, = the suite's `peers`)


def _peer(tool: str) -> dict[str, Any]:
    return dict(suite("peers")["summary"][tool])


@figure("peers.cases")
def _peers_cases(tool: str) -> str:
    return str(_peer(tool)["cases"])


@figure("peers.error")
def _peers_error(tool: str) -> str:
    p = _peer(tool)
    return f"{pct(p['median_abs_error'], 2)} / {pct(p['max_abs_error'], 2)}"


@figure("peers.time")
def _peers_time(tool: str) -> str:
    us = _peer(tool)["median_us_per_call"]
    return f"{us / 1000:.0f} ms" if us >= 1000 else f"{us:.0f} µs"


@figure("peers.median_range")
def _peers_median_range() -> str:
    others = [s for t, s in suite("peers")["summary"].items() if t != "gpuplan"]
    return span([s["median_abs_error"] * 100 for s in others], 0, "%")


@figure("peers.gpuplan_same_cases")
def _peers_gpuplan_same_cases(tool: str) -> str:
    return pct(_peer(tool)["gpuplan_median_abs_error_same_cases"], 2)


@figure("peers.low")
def _peers_low(tool: str) -> str:
    p = _peer(tool)
    return f"all {p['cases']}" if p["underestimates"] == p["cases"] else str(p["underestimates"])


@figure("peers.high")
def _peers_high(tool: str) -> str:
    p = _peer(tool)
    return f"{p['cases'] - p['underestimates']} of {p['cases']}"


def _peer_errors(tool: str) -> list[float]:
    rows = suite("peers")["rows"] if "rows" in suite("peers") else results("peers.json")["rows"]
    return [r["answers"][tool]["error"] for r in rows if "error" in r["answers"].get(tool, {})]


@figure("peers.worst_signed")
def _peers_worst_signed(tool: str) -> str:
    return signed(max(_peer_errors(tool), key=abs), 0)


@figure("peers.range")
def _peers_range(tool: str) -> str:
    return span([abs(e) * 100 for e in _peer_errors(tool)], 0, "%")


@figure("peers.gpuplan_worst_case")
def _peers_gpuplan_worst_case() -> str:
    rows = results("peers.json")["rows"]
    worst = max(rows, key=lambda r: abs(r["answers"]["gpuplan"]["error"]))
    return f"{pct(abs(worst['answers']['gpuplan']['error']), 2)} (`{worst['case']}`)"


@figure("peers.remeasured")
def _peers_remeasured() -> str:
    """How many of the peers' cases the accuracy grid has re-measured since the peers ran
    (the peers compare against the measured peaks they read then), and by how much."""
    grid = {r["case"]: r["measured_bytes"] for r in results("accuracy.json")["rows"]}
    rows = results("peers.json")["rows"]
    moved = [
        abs(grid[r["case"]] / r["measured_bytes"] - 1)
        for r in rows
        if grid[r["case"]] != r["measured_bytes"]
    ]
    if not moved:
        return f"none of the {len(rows)} has been re-measured since"
    return (
        f"{len(moved)} of the {len(rows)} have been re-measured since, by at most {pct(max(moved))}"
    )


# ---------------------------------------------------------------------------------------
# The MIG planner's full-size run (bench/results/mig_packing.json, 400 instances)


def _mig() -> dict[str, Any]:
    return dict(results("mig_packing.json"))


@figure("mig.command")
def _mig_command() -> str:
    return f"`{_mig()['command']}`"


@figure("mig.instances")
def _mig_instances() -> str:
    cases = _mig()["cases"]
    families: dict[str, int] = {}
    for c in cases:
        families[c["family"]] = families.get(c["family"], 0) + 1
    tables = sorted({c["table"] for c in cases})
    kinds = " and ".join(
        f"{n} `{family}`" for family, n in sorted(families.items(), key=lambda x: -x[1])
    )
    return f"{kinds} instances over {len(tables)} tables ({', '.join(f'`{t}`' for t in tables)})"


@figure("mig.table")
def _mig_table() -> str:
    s = _mig()["summary"]
    cases = _mig()["cases"]
    small = [c for c in cases if c["milp_gpus"] <= 64]
    large = [c for c in cases if c["milp_gpus"] > 64]
    top = max(c["milp_gpus"] for c in large)

    def row(label: str, group: list[dict[str, Any]], gap: str) -> str:
        equal = sum(c["gpus"] == c["milp_gpus"] for c in group)
        proven = sum(c["proven_optimal"] for c in group)
        return f"| {label} | {len(group)} | {equal} | {proven} | {gap} |"

    return "\n".join(
        [
            "| instances | count | planner = MILP optimum | planner at its own bound (`optimal`) | worst gap |",
            "| --- | --- | --- | --- | --- |",
            row("optimum up to 64 GPUs", small, f"{s['up_to_64_gpus']['max_gap_gpus']} GPUs"),
            row(
                f"optimum 65 to {top:,} GPUs",
                large,
                f"{s['over_64_gpus']['max_gap_over_lower_bound_pct']:.1f}% over the lower bound",
            ),
            f"| all plans, independent checker | {s['instances']} | | | {s['check_errors']} errors |",
        ]
    )


@figure("mig.proven")
def _mig_proven() -> str:
    s = _mig()["summary"]
    return f"{s['proven_optimal']} of {s['instances']}"


@figure("mig.tie_breaks")
def _mig_tie_breaks() -> str:
    t = _mig()["summary"]["tie_breaks_up_to_64_gpus"]
    other = t["instances"] - t["stranded_equal_to_milp"]
    return (
        f"on the {t['instances']} instances up to 64 GPUs, against the lexicographic "
        "MILP (GPUs, then stranded compute, then distinct layouts; every GI serving a workload, "
        f"as in the planner's output): stranded compute equal to the MILP's least on "
        f"{t['stranded_equal_to_milp']} (at most {t['stranded_excess_max']} slice more on the "
        f"other {other}); distinct layouts equal to the MILP's fewest on "
        f"{t['layouts_equal_to_milp']} of the {t['layouts_rated']} rated (at most "
        f"{t['layouts_excess_max']} more)."
    )


def _duration(seconds: float) -> str:
    return f"{seconds:.2f} s" if seconds >= 0.1 else f"{seconds * 1000:.1f} ms"


@figure("mig.times")
def _mig_times() -> str:
    s = _mig()["summary"]
    return "\n".join(
        [
            "| time per instance | median | max |",
            "| --- | --- | --- |",
            f"| planner, end to end (`partition()`) | {_duration(s['planner_s']['median'])} | "
            f"{_duration(s['planner_s']['max'])} |",
            f"| HiGHS MILP (solve only, GPU count stage) | {_duration(s['milp_s']['median'])} | "
            f"{_duration(s['milp_s']['max'])} |",
            f"| ratio MILP / planner (median of per-instance ratios) | "
            f"{s['time_ratio_milp_over_planner_median']:.1f} | |",
        ]
    )


@figure("mig.scale")
def _mig_scale() -> str:
    x = _mig()["scale_10k_workloads"]
    optimum = (
        "equal to the planner's bound and to the MILP optimum"
        if (x["gpus"] == x["lower_bound"] == x["milp_gpus"])
        else f"the planner's bound {x['lower_bound']:,}, the MILP {x['milp_gpus']:,}"
    )
    runs = x["planner_s_runs"]
    return (
        f"{x['gpus']:,} GPUs, {optimum}; the planner took {span(runs, 2, ' s')} over "
        f"{len(runs)} runs on one core, HiGHS {x['milp_s']:.2f} s"
    )


# ---------------------------------------------------------------------------------------
# Planning a CI file (bench/results/plan_speed.json)


@figure("plan_speed.cpu")
def _plan_speed_cpu() -> str:
    rows = results("plan_speed.json")["rows"]
    return span([r["median_cpu_ms"] for r in rows], 0, " ms")


@figure("plan_speed.wall")
def _plan_speed_wall() -> str:
    rows = results("plan_speed.json")["rows"]
    return span([r["median_ms"] for r in rows], 0, " ms")


@figure("plan_speed.files")
def _plan_speed_files() -> str:
    return str(len(results("plan_speed.json")["rows"]))


# ---------------------------------------------------------------------------------------
# Answers of the service, computed by the core from the request the doc shows


SERVING_EXAMPLE = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048},
    "inference": {"requests_per_second": 5, "prompt_tokens": 2048, "output_tokens": 512},
    "objective": "cheapest",
}
"""docs/recommendation.md's serving example: Llama 3.1 70B, 2,048 tokens in, 512 out,
5 requests/s, the cheapest plan (what `gpuplan recommend --model llama-3.1-70b --mode
inference --seq-len 2048 --output-tokens 512 --rps 5 --objective cheapest` asks)."""


@figure("answer.serving_example")
def _answer_serving_example() -> str:
    import msgspec

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest, recommend

    answer = recommend(msgspec.convert(SERVING_EXAMPLE, RecommendRequest), builtin_catalog())
    plans = [c for c in answer.recommendations if c.score is not None and not c.breaches][:4]
    parts = []
    for i, c in enumerate(plans):
        assert c.layout is not None
        tp, replicas = c.layout.tensor, c.layout.data
        shape = "one" if replicas == 1 else str(replicas)
        text = f"{c.count} × `{c.gpu}` ({shape} TP{tp} replica{'s' if replicas > 1 else ''}"
        if i == 0 and c.latency is not None:
            text += (
                f", {c.latency.concurrency} in flight, TTFT "
                f"{c.latency.time_to_first_token_s * 1000:.0f} ms, TPOT "
                f"{c.latency.time_per_output_token_s * 1000:.0f} ms"
            )
        parts.append(text + ")")
    return f"{parts[0]}, then {', '.join(parts[1:-1])} and {parts[-1]}"


SERVING_ENGINES: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048, "parallelism": {"tensor": 4}},
    "inference": {"prompt_tokens": 2048, "output_tokens": 512},
    "layout": "given",
    "constraints": {"include": ["h100-sxm5-80gb"]},
}
"""docs/serving.md's comparison: one TP4 replica of Llama 3.1 70B on H100s, per engine."""


@figure("answer.serving_engines")
def _answer_serving_engines() -> str:
    import msgspec

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest, recommend

    rows = [
        "| engine | share | KV cache per GPU | in flight | command |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for engine in ("vllm", "sglang", "trtllm"):
        body = {**SERVING_ENGINES, "inference": {**SERVING_ENGINES["inference"], "engine": engine}}
        c = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog()).recommendations[0]
        run = c.launch
        assert run is not None
        assert c.latency is not None
        rows.append(
            f"| {engine} | {run.memory_fraction} | {run.kv_cache_bytes_per_gpu / 2**30:.1f} GiB "
            f"| {c.latency.concurrency} | `{run.shell}` |"
        )
    return "\n".join(rows)


DISAGG: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048, "precision": "bf16"},
    "inference": {
        "prompt_tokens": 2048,
        "output_tokens": 512,
        "max_time_per_output_token_s": 0.05,
        "max_time_to_first_token_s": 2.0,
        "compare_disaggregated": True,
    },
    "constraints": {"include": ["h100-sxm5-80gb"]},
}
"""docs/serving.md's aggregated-versus-disaggregated example: Llama 3.1 70B on H100s,
2,048 in and 512 out, TPOT within 50 ms, at a low and a high rate."""


@figure("answer.disaggregation")
def _answer_disaggregation() -> str:
    import msgspec

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest, recommend

    rows = [
        "| requests/s | aggregated | disaggregated | KV transfer | winner |",
        "| ---: | --- | --- | --- | --- |",
    ]
    for rate in (1.0, 20.0):
        body = {**DISAGG, "inference": {**DISAGG["inference"], "requests_per_second": rate}}
        c = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog()).recommendations[0]
        d = c.disaggregation
        assert d is not None
        assert d.disaggregated is not None
        assert d.kv_transfer is not None
        a, x, t = d.aggregated, d.disaggregated, d.kv_transfer

        def side(v: Any, ratio: str = "") -> str:
            return (
                f"{ratio}{v.gpus} GPUs, ${v.usd_per_hour:,.2f}/h, TTFT "
                f"{v.time_to_first_token_s * 1000:.0f} ms, TPOT {v.time_per_output_token_s * 1000:.1f} ms"
            )

        rows.append(
            f"| {rate:g} | {side(a)} | {side(x, f'{d.ratio}: ')} | "
            f"{t.bytes_per_request / 2**20:,.0f} MiB over {t.link}, {t.seconds * 1000:.1f} ms "
            f"| {d.winner} |"
        )
    return "\n".join(rows)


@figure("slo_search.counts")
def _slo_search_counts() -> str:
    """Probes of the SLO searches over the catalog (bench/speed/slo_search.py)."""
    r = results("slo_search.json")
    rows = [
        "| request | replica search: probes (doubling, bisection) | rate within the SLO: probes (fresh table; eight halvings) | worst below the turn (eight halvings) |",
        "| --- | ---: | ---: | ---: |",
    ]
    for x in [*r["rows"], {**r["total"], "case": "all"}]:
        rows.append(
            f"| {x['case']} | {x['replica_probes']:,} ({x['replica_probes_doubling_bisection']:,}) "
            f"| {x['max_rate_probes']:,} ({x['max_rate_probes_fresh_table']:,}; {x['halving_probes']:,}) "
            f"| {pct(x['max_rate_worst_below_turn'], 2)} ({pct(x['halving_worst_below_turn'], 1)}) |"
        )
    return "\n".join(rows)


@figure("queue_model.table")
def _queue_model_table() -> str:
    """Model vs simulation of every case and load (bench/serving/queue_sim.py)."""
    r = results("queue_model.json")
    rows = [
        "| plan | load | TTFT p50 / p95 / p99 (model vs simulation) | TPOT p50 / p95 / p99 (model vs simulation) |",
        "| --- | ---: | --- | --- |",
    ]
    for x in r["rows"]:
        cells = []
        for figure_name, scale, unit in (("ttft_s", 1.0, "s"), ("tpot_s", 1e3, "ms")):
            cells.append(
                " / ".join(
                    f"{x[f'{figure_name}_{q}_model'] * scale:.3g} vs {x[f'{figure_name}_{q}_sim'] * scale:.3g}"
                    for q in ("p50", "p95", "p99")
                )
                + f" {unit}"
            )
        rows.append(f"| {x['case']} (cap {x['cap']}) | {x['load']:.0%} | {cells[0]} | {cells[1]} |")
    return "\n".join(rows)


@figure("queue_model.summary")
def _queue_model_summary() -> str:
    """Median absolute error of each percentile over the grid, all loads and up to 90%."""
    r = results("queue_model.json")
    rows = [
        "| figure | p50 | p95 | p99 |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        for scope, words in (("all", "all loads"), ("within_90", "loads up to 90%")):
            cells = []
            for q in ("p50", "p95", "p99"):
                s = r["summary"][f"{name}_{q}"]
                value = (
                    s["median_abs_error"] if scope == "all" else s["within_90"]["median_abs_error"]
                )
                cells.append(pct(value, 0))
            rows.append(f"| {label}, median abs. error, {words} | " + " | ".join(cells) + " |")
        worst = [
            pct(r["summary"][f"{name}_{q}"]["max_abs_error"], 0) for q in ("p50", "p95", "p99")
        ]
        rows.append(f"| {label}, worst | " + " | ".join(worst) + " |")
    return (
        "\n".join(rows)
        + f"\n\n{r['requests']:,} simulated requests per point (seed {r['seed']}), the first 10% dropped."
    )


SERVING_LOAD: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {"mode": "inference", "sequence_length": 2048, "max_new_tokens": 512},
    "inference": {"requests_per_second": 5},
    "constraints": {"include": ["h100-sxm5-80gb"]},
    "objective": "cheapest",
    "limit": 1,
}
"""docs/serving.md's worked example: Llama 3.1 70B at 5 requests/s on H100s, by target."""


@figure("answer.serving_load")
def _answer_serving_load() -> str:
    import msgspec

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest, recommend

    rows = [
        "| `inference.slo` | replicas x TP | `--max-num-seqs` | in flight | TTFT p50 / p95 / p99 | TPOT p50 / p95 / p99 | one replica within the SLO |",
        "| --- | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for slo in (None, {"ttft_p95_s": 1.0}, {"ttft_p95_s": 0.6, "tpot_p95_s": 0.04}):
        iv = {**SERVING_LOAD["inference"], **({"slo": slo} if slo else {})}
        body = {**SERVING_LOAD, "inference": iv}
        c = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog()).recommendations[0]
        assert c.latency is not None
        assert c.layout is not None
        assert c.latency.under_load is not None
        u = c.latency.under_load
        ft, fp = u.time_to_first_token_s, u.time_per_output_token_s
        within = c.latency.max_requests_per_s_within_slo
        rows.append(
            f"| {json.dumps(slo) if slo else 'none'} | {c.layout.data} x {c.layout.tensor} "
            f"| {c.latency.concurrency} | {u.mean_in_flight:.0f} "
            f"| {ft.p50 * 1e3:.0f} / {ft.p95 * 1e3:.0f} / {ft.p99 * 1e3:.0f} ms "
            f"| {fp.p50 * 1e3:.1f} / {fp.p95 * 1e3:.1f} / {fp.p99 * 1e3:.1f} ms "
            f"| {f'{within:.2f} requests/s' if within is not None else '-'} |"
        )
    return "\n".join(rows)


MOE_EP: dict[str, Any] = {
    "model": {"name": "deepseek-v3"},
    "workload": {
        "mode": "inference",
        "sequence_length": 2048,
        "precision": "fp8",
        "weight_quantization": "fp8",
    },
    "inference": {"prompt_tokens": 2048, "output_tokens": 512, "requests_per_second": 20},
    "constraints": {"include": ["h200-sxm-141gb"]},
    "all_counts": True,
}
"""docs/serving.md's expert-parallel example: DeepSeek-V3 (fp8 weights) on H200s."""


@figure("answer.moe_ep")
def _answer_moe_ep() -> str:
    import msgspec

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest, recommend

    answer = recommend(msgspec.convert(MOE_EP, RecommendRequest), builtin_catalog())
    rows = [
        "| layout | GPUs | GiB per GPU | in flight per replica | TPOT | output tokens/s per replica | command |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    seen = set()
    for c in answer.recommendations:
        if c.layout is None or c.latency is None or c.launch is None or not c.fits:
            continue
        kind = "EP 8, DP attention" if c.layout.expert > 1 else f"TP {c.layout.tensor}"
        if kind in seen or (c.layout.expert == 1 and c.layout.tensor != 8):
            continue
        seen.add(kind)
        rows.append(
            f"| {kind} | {c.count} | {c.required_bytes_per_gpu / 2**30:.1f} | {c.latency.concurrency} "
            f"| {c.latency.time_per_output_token_s * 1000:.1f} ms | {c.latency.output_tokens_per_s:,.0f} "
            f"| `{c.launch.shell}` |"
        )
    return "\n".join(rows)


STATIC_BATCH: dict[str, Any] = {
    "model": {"name": "llama-3.1-70b"},
    "workload": {
        "mode": "inference",
        "sequence_length": 2048,
        "max_new_tokens": 512,
        "batch_size": 64,
    },
    "constraints": {"include": ["h200-sxm-141gb"], "gpu_counts": [2]},
    "limit": 1,
}
"""Issue 34's static batch: Llama 3.1 70B, 2 x H200, batch 64, 2,048 in / 512 out."""


@figure("answer.static_batch")
def _answer_static_batch() -> str:
    import msgspec

    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.recommend import RecommendRequest, recommend

    c = recommend(
        msgspec.convert(STATIC_BATCH, RecommendRequest), builtin_catalog()
    ).recommendations[0]
    assert c.latency is not None
    return (
        f"`kind: {c.latency.kind}`, TTFT {c.latency.time_to_first_token_s:.1f} s "
        f"(all 64 prompts prefilled at once), TPOT {c.latency.time_per_output_token_s * 1e3:.0f} ms"
    )


EXAMPLES = ROOT / "examples"


@cache
def _plan(file_name: str) -> tuple[Any, int]:
    """The report of ``gpuplan plan examples/FILE`` and its exit code."""
    from gpuplan.config.catalog import load_catalog
    from gpuplan.config.documents import read_document
    from gpuplan.core.ci import CiPlan, check
    from gpuplan.core.convert import convert

    report = check(convert(read_document(EXAMPLES / file_name), CiPlan), load_catalog(None))
    return report, 0 if report.passed else 1


@figure("answer.ci_example")
def _answer_ci_example(file_name: str) -> str:
    report, code = _plan(file_name)
    fits = next((v for v in report.verdicts if v.target == "fits"), None)
    passed = sum(v.status == "pass" for v in report.verdicts)
    head = ""
    if fits is not None and fits.gpu is not None:
        gib = 2**30
        head = (
            f"{fits.count} x `{fits.gpu}` at `{fits.layout}`: {fits.actual / gib:.2f} of "
            f"{fits.limit / gib:.2f} GiB per GPU; "
        )
    return (
        f"{head}scenario `{report.scenario.class_}`; {passed} of {len(report.verdicts)} "
        f"targets pass, exit {code}"
    )


# ---------------------------------------------------------------------------------------
# The tracer (bench/results/trace_*.json, job_latency.json)


@figure("trace_7b.study")
def _trace_7b_study() -> str:
    rows = _rows("trace_7b.json")
    trace = span([r["trace_seconds"] for r in rows], 1, " s")
    process = span([r["process_seconds"] for r in rows], 1, " s")
    rss = max(r["max_rss_bytes"] for r in rows) / 2**30
    return (
        f"traces in {trace} ({process} for the whole process, imports included; the spread "
        f"is the load of the shared machine) with a peak RSS of at most {rss:.2f} GiB"
    )


@figure("trace_7b.rss")
def _trace_7b_rss() -> str:
    return f"{max(r['max_rss_bytes'] for r in _rows('trace_7b.json')) / 2**30:.2f} GiB"


@figure("trace_7b.bytes")
def _trace_7b_bytes(dtype: str) -> str:
    row = next(r for r in _rows("trace_7b.json") if r["dtype"] == dtype and r["runtime"] == "cuda")
    return (
        f"{row['peak_bytes'] / 2**30:.1f} GiB allocated, "
        f"{row['reserved_bytes'] / 2**30:.1f} GiB reserved"
    )


@figure("trace_decode.summary")
def _trace_decode_summary() -> str:
    d = results("trace_decode.json")
    prefill = next(r for r in d["rows"] if r["new_tokens"] == 0)
    longest = max(d["rows"], key=lambda r: r["new_tokens"])
    return (
        f"{d['seconds_per_decode_step']:.2f} s per decode step on 2 cores "
        f"({prefill['trace_seconds']:.1f} s for the prefill alone, "
        f"{longest['trace_seconds']:.0f} s with {longest['new_tokens']} new tokens)"
    )


@figure("trace_vs_analytic.summary")
def _trace_vs_analytic_summary() -> str:
    rows = _rows("trace_vs_analytic.json")
    close = [r for r in rows if abs(r["analytic_error"]) <= 0.0002]
    others = [r for r in rows if r not in close]
    text = f"{len(close)} of {len(rows)} cases agree within 0.02%"
    if others:
        text += "; " + ", ".join(
            f"{r['case']} is {pct(abs(r['analytic_error']), 2)} "
            f"{'under' if r['analytic_error'] < 0 else 'over'} the trace"
            for r in others
        )
    return text


@figure("trace_vs_analytic.seconds")
def _trace_vs_analytic_seconds(case: str) -> str:
    row = next(
        r for r in _rows("trace_vs_analytic.json") if r["case"].startswith(case.replace("_", " "))
    )
    return f"{row['trace_seconds']:.0f} s"


@figure("trace_probes.summary")
def _trace_probes_summary() -> str:
    d = results("trace_probes.json")
    rows = d["rows"]
    exact = sum(r["probed_error"] == 0 for r in rows)
    worst = min(rows, key=lambda r: r["unprobed_error"])
    training = min((r for r in rows if r["mode"] == "train"), key=lambda r: r["unprobed_error"])
    s = d["summary"]
    return (
        f"With probes every case is within {pct(s['probed']['max_abs_error'], 2)} ({exact} of "
        f"{len(rows)} to the byte); without them up to {pct(-worst['unprobed_error'])} low "
        f"({worst['model']} {worst['mode']}), {pct(-training['unprobed_error'])} in training. "
        f"The probes cost real time: median trace {s['probed']['median_seconds']:.1f} s "
        f"against {s['unprobed']['median_seconds']:.1f} s"
    )


SEQ2SEQ = ("t5", "bart", "whisper")


@figure("trace_cost.types")
def _trace_cost_types() -> str:
    return str(len(results("trace_cost.json")["families"]))


@figure("trace_cost.per_call")
def _trace_cost_per_call() -> str:
    d = results("trace_cost.json")
    return (
        f"{d['seconds_per_training_operator'] * 1e6:.0f} µs per operator call in a training "
        f"trace and {d['seconds_per_inference_operator'] * 1e6:.0f} µs in an inference trace"
    )


@figure("trace_cost.checks")
def _trace_cost_checks() -> str:
    checks = [c for c in results("trace_cost.json")["checks"] if not c["name"].startswith(SEQ2SEQ)]
    outliers = [c for c in checks if c["ratio"] < 0.5]
    rest = [c for c in checks if c not in outliers]
    text = (
        f"predicted over measured is {span([c['ratio'] for c in rest], 2)} on {len(rest)} "
        f"(median of all {len(checks)} {statistics.median(c['ratio'] for c in checks):.2f})"
    )
    for c in outliers:
        text += (
            f"; {c['name']}, a {c['measured_seconds']:.1f} s trace, is predicted at "
            f"{c['predicted_seconds']:.2f} s"
        )
    return text


@figure("trace_cost.seq2seq")
def _trace_cost_seq2seq() -> str:
    checks = [c for c in results("trace_cost.json")["checks"] if c["name"].startswith(SEQ2SEQ)]
    return "; ".join(f"{c['name']} {c['ratio']:.2f}" for c in checks)


@figure("job_latency.summary")
def _job_latency_summary() -> str:
    d = results("job_latency.json")
    return (
        f"median {d['warm_worker_median_seconds']:.2f} s end to end, the slowest "
        f"{d['warm_worker_max_seconds']:.2f} s, over {len(d['warm_worker_seconds'])} traces; "
        f"a worker's warm-up {d['worker_start_seconds']:.1f} s once"
    )


@figure("job_latency.warmup")
def _job_latency_warmup() -> str:
    return f"{results('job_latency.json')['worker_start_seconds']:.1f} s"


@figure("trace_cost.width_seconds")
def _trace_cost_width_seconds() -> str:
    check = next(c for c in results("trace_cost.json")["checks"] if "wide" in c["name"])
    return f"{check['measured_seconds']:.1f} s"


TRACE_CUDA_GROUPS = {
    "models": ("hf_llama", "hf_mixtral_bf16", "llama_medium_bf16"),
    "small": ("mlp", "cnn", "transformer", "checkpointed"),
}
"""runtime cuda's checks on one H200, grouped as docs/trace.md reads them."""


@figure("trace_cuda.within")
def _trace_cuda_within(group: str) -> str:
    rows = [r for r in _rows("trace_cuda.json") if r["target"] in TRACE_CUDA_GROUPS[group]]
    allocated = max(abs(r["allocated_error"]) for r in rows)
    reserved = max(abs(r["reserved_error"]) for r in rows)
    return (
        f"allocated within {pct(allocated, 2 if allocated < 0.01 else 1)}, "
        f"reserved within {pct(reserved, 2 if reserved < 0.01 else 1)}"
    )


@figure("trace_cuda.error")
def _trace_cuda_error(target: str) -> str:
    row = next(r for r in _rows("trace_cuda.json") if r["target"] == target)
    return (
        f"{pct(abs(row['allocated_error']), 0)} {'low' if row['allocated_error'] < 0 else 'high'}"
    )


# ---------------------------------------------------------------------------------------
# The caching-allocator model (reserve_replay.json: against the tracer's replay;
# reserve_cuda.json: steps measured on an H200, against today's estimate of each)


def _replay_errors() -> list[float]:
    return [r["error"] for r in _rows("reserve_replay.json")]


@figure("reserve_replay.median")
def _reserve_replay_median() -> str:
    return pct(results("reserve_replay.json")["summary"]["median_abs_error"])


@figure("reserve_replay.cases")
def _reserve_replay_cases() -> str:
    return str(results("reserve_replay.json")["summary"]["cases"])


@figure("reserve_replay.low")
def _reserve_replay_low() -> str:
    low = sorted((e for e in _replay_errors() if e < -0.05), reverse=True)
    return ", ".join(signed(e, 0) for e in low)


@figure("reserve_replay.high")
def _reserve_replay_high() -> str:
    high = [e * 100 for e in _replay_errors() if round(e * 100) >= 5]
    return f"{len(high)} cases are {span(high, 0, '%')} high"


@cache
def _h200_errors() -> dict[str, list[float]]:
    """Today's estimate of each H200 step against what the GPU measured."""
    import msgspec

    from bench.accuracy.reserve import CASES, SHAPES, request_body
    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.memory.estimate import estimate
    from gpuplan.core.memory.schema import EstimateRequest

    measured = {r["case"]: r for r in _rows("reserve_cuda.json")}
    traced = {r["case"]: r for r in _rows("reserve_replay.json")}
    errors: dict[str, list[float]] = {"peak": [], "reserved": [], "device": [], "traced": []}
    for case in CASES:
        body = {**request_body(case, SHAPES), "gpu": "h200-sxm-141gb", "cuda_version": "13.0"}
        answer = estimate(msgspec.convert(body, EstimateRequest), builtin_catalog())
        real = measured[case.name]
        errors["peak"].append(answer.peak_bytes / real["max_memory_allocated_last_step"] - 1)
        errors["reserved"].append(answer.reserved_bytes / real["max_memory_reserved"] - 1)
        errors["device"].append(answer.device_bytes / real["nvml_process_bytes"] - 1)
        errors["traced"].append(
            traced[case.name]["traced_reserved_bytes"] / real["max_memory_reserved"] - 1
        )
    return errors


def _median_range(errors: list[float]) -> tuple[str, str]:
    median = statistics.median(abs(e) for e in errors)
    digits = 2 if max(abs(e) for e in errors) < 0.01 else 1
    between = f"{signed(min(errors), digits)} to {signed(max(errors), digits)}"
    return pct(median, 2 if median < 0.01 else 1), between


@figure("reserve_cuda.table")
def _reserve_cuda_table() -> str:
    errors = _h200_errors()
    rows = [
        ("`peak_bytes`", "`max_memory_allocated`, last step", errors["peak"]),
        ("`reserved_bytes`", "`max_memory_reserved`", errors["reserved"]),
        ("`device_bytes`", "the process in NVML's process list (nvidia-smi)", errors["device"]),
        (
            "traced `reserved_bytes` (`bench/results/reserve_replay.json`, fake tensors on a CPU)",
            "`max_memory_reserved`",
            errors["traced"],
        ),
    ]
    lines = [
        "| measure | compared with | median \\|error\\| | range |",
        "| --- | --- | --- | --- |",
    ]
    for measure, against, e in rows:
        median, between = _median_range(e)
        lines.append(f"| {measure} | {against} | {median} | {between} |")
    return "\n".join(lines)


@figure("reserve_cuda.traced")
def _reserve_cuda_traced() -> str:
    errors = _h200_errors()["traced"]
    median, _ = _median_range(errors)
    return f"within {median} median of the real `max_memory_reserved`, worst {signed(max(errors, key=abs))}"


@figure("reserve_cuda.medians")
def _reserve_cuda_medians() -> str:
    errors = _h200_errors()
    return ", ".join(
        f"`{name}_bytes` {'median ' if i == 0 else ''}{_median_range(errors[name])[0]}"
        for i, name in enumerate(("peak", "reserved", "device"))
    )


def _varlen(kind: str) -> dict[str, Any]:
    return next(r for r in results("varlen_cuda.json")["runs"] if r["kind"] == kind)


@figure("varlen.fixed")
def _varlen_fixed() -> str:
    return f"{_varlen('fixed')['max_reserved'] / 1e9:.2f} GB"


@figure("varlen.varying")
def _varlen_varying() -> str:
    fixed, varying = _varlen("fixed"), _varlen("varying")
    return (
        f"{varying['max_reserved'] / 1e9:.2f} GB: {varying['max_reserved'] / fixed['max_reserved'] - 1:.0%} "
        f"more, although no step allocated as much ({varying['max_allocated'] / 1e9:.2f} GB at "
        f"most, against {fixed['max_allocated'] / 1e9:.2f})"
    )


@figure("varlen.expandable")
def _varlen_expandable() -> str:
    run = _varlen("varying_expandable")
    return (
        f"{run['max_reserved'] / 1e9:.2f} GB, "
        f"{pct(run['max_reserved'] / run['max_allocated'] - 1)} above its allocated peak"
    )


@figure("varlen.replay")
def _varlen_replay() -> str:
    rows = _rows("varlen_replay.json")
    gbs = ", ".join(f"{r['replayed_reserved_bytes'] / 1e9:.2f}" for r in rows[:-1])
    gbs += f" and {rows[-1]['replayed_reserved_bytes'] / 1e9:.2f}"
    below = [-r["reserved_error"] * 100 for r in rows]
    assert min(below) > 0, "a replay above its run: the sentence says below"
    return f"{gbs} GB reserved, {span(below, 2, '%')} below each run"


def _h200_by_case() -> list[tuple[dict[str, Any], dict[str, float]]]:
    """Each H200 row with today's errors of its estimate (peak, reserved, device)."""
    errors = _h200_errors()
    rows = _rows("reserve_cuda.json")
    from bench.accuracy.reserve import CASES

    order = [c.name for c in CASES]
    by_name = {r["case"]: r for r in rows}
    return [
        (by_name[name], {k: errors[k][i] for k in ("peak", "reserved", "device")})
        for i, name in enumerate(order)
    ]


@figure("reserve_cuda.workspaces")
def _reserve_cuda_workspaces() -> str:
    full = [
        (r["max_memory_allocated_last_step"] - r["estimated_peak_bytes"]) / 2**20
        for r in _rows("reserve_cuda.json")
        if r["request"]["workload"].get("lora") is None
    ]
    return span(full, 0, " MiB").replace("-", "–")


@figure("reserve_cuda.tensors_alone")
def _reserve_cuda_tensors_alone() -> str:
    """The estimate of the run's day (tensors alone, before the cuBLAS workspaces)."""
    low = [-r["peak_error"] * 100 for r in _rows("reserve_cuda.json")]
    assert min(low) > 0, "the sentence says low"
    return span(low, 2, "%").replace("-", "–")


@figure("reserve_cuda.reserved")
def _reserve_cuda_reserved(case: str) -> str:
    name = case.replace("_", " ")
    return next(signed(e["reserved"]) for r, e in _h200_by_case() if r["case"] == name)


@figure("reserve_cuda.reserved_high")
def _reserve_cuda_reserved_high() -> str:
    high = [e["reserved"] * 100 for _, e in _h200_by_case() if e["reserved"] > 0.02]
    return f"{len(high)} more are {span(high, 1, '%').replace('-', '–')} high"


@figure("reserve_cuda.context")
def _reserve_cuda_context() -> str:
    by_precision: dict[str, set[float]] = {}
    for r in _rows("reserve_cuda.json"):
        precision = r["request"]["workload"]["precision"]
        context = (r["nvml_process_bytes"] - r["max_memory_reserved"]) / 2**20
        by_precision.setdefault(precision, set()).add(round(context))
    counts = {
        p: sum(r["request"]["workload"]["precision"] == p for r in _rows("reserve_cuda.json"))
        for p in by_precision
    }
    parts = []
    for precision, values in sorted(by_precision.items(), key=lambda x: -counts[x[0]]):
        value = f"{min(values):,.0f}" if len(values) == 1 else span(sorted(values), 0)
        where = f"every {precision} step" if counts[precision] > 1 else f"the {precision} one"
        parts.append(f"{value} MiB in {where}")
    return " and ".join(parts)


def _device_split() -> tuple[list[float], list[float]]:
    """Device errors of the steps whose reserved reads right, and of those it reads low."""
    pairs = [e for _, e in _h200_by_case()]
    low = [e["device"] for e in pairs if e["reserved"] < -0.10]
    return [e["device"] for e in pairs if e["reserved"] >= -0.10], low


@figure("reserve_cuda.device_high")
def _reserve_cuda_device_high() -> str:
    right, _ = _device_split()
    return f"median {signed(statistics.median(right))}, at most {signed(max(right))}"


@figure("reserve_cuda.device_low")
def _reserve_cuda_device_low() -> str:
    _, low = _device_split()
    return ", ".join(signed(e) for e in sorted(low, reverse=True))


@figure("varlen.replay_error")
def _varlen_replay_error(kind: str) -> str:
    row = next(r for r in _rows("varlen_replay.json") if r["kind"] == kind)
    return (
        f"{pct(abs(row['reserved_error']), 2)} {'below' if row['reserved_error'] < 0 else 'above'}"
    )


@figure("vision.gflop")
def _vision_gflop(preset: str) -> str:
    return f"{results('vision_flops.json')[preset] / 1e9:.1f} GFLOP"


@figure("vision.sdxl_seconds")
def _vision_sdxl_seconds() -> str:
    return f"{results('vision_presets_traced.json')['sdxl-unet']['seconds']:.0f} s"


@figure("vision.sd15_agreement")
def _vision_sd15_agreement() -> str:
    name = "stable-diffusion-1.5-unet"
    tracker, traced = (
        results("vision_presets.json")[name],
        results("vision_presets_traced.json")[name],
    )

    def gap(field: str) -> str:
        return pct(abs(tracker[field] / traced[field] - 1), 2)

    return (
        f"training bytes per sample within {gap('training_bytes_per_sample')}, "
        f"inference within {gap('inference_bytes_per_sample')}"
    )


@figure("reserve_cuda.cases")
def _reserve_cuda_cases() -> str:
    return str(len(_rows("reserve_cuda.json")))


# ---------------------------------------------------------------------------------------
# Reading and writing the docs


def docs(root: Path = ROOT) -> list[Path]:
    found: list[Path] = []
    for pattern in DOCS:
        found += sorted(root.glob(pattern))
    return found


def render(name: str) -> str:
    """The text of figure ``name`` (``base`` or ``base:argument``)."""
    base, _, argument = name.partition(":")
    function = FIGURES[base]
    return function(argument) if argument else function()


def _framed(text: str, indent: str = "") -> str:
    """A figure of several lines sits between markers on lines of their own, indented as
    its opening marker is (a table inside a list item)."""
    if "\n" not in text:
        return text
    lines = [indent + line if line else line for line in text.split("\n")]
    return "\n" + "\n".join(lines) + "\n" + indent


def _indent(text: str, start: int) -> str:
    """The whitespace before position ``start`` on its line ('' when words come first)."""
    before = text[text.rfind("\n", 0, start) + 1 : start]
    return before if before.strip() == "" else ""


def problems(text: str, where: str) -> Iterator[str]:
    """What is wrong with the marked spans of one doc: an unknown name, a stale text, an
    inline span that opens a line (Markdown would read the line as raw HTML)."""
    for match in SPAN.finditer(text):
        name, found = match["name"], match["text"]
        line = text.count("\n", 0, match.start()) + 1
        base = name.partition(":")[0]
        if base not in FIGURES:
            close = difflib.get_close_matches(base, FIGURES, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            yield f"{where}:{line}: figure {name!r} is unknown to bench/quote.py{hint}"
            continue
        try:
            expected = _framed(render(name), _indent(text, match.start()))
        except Exception as error:  # a figure that cannot be computed is a problem too
            yield f"{where}:{line}: figure {name!r} cannot be computed: {error!r}"
            continue
        if found != expected:
            yield (
                f"{where}:{line}: figure {name!r} says\n    {found.strip()!r}\n"
                f"  but its source says\n    {expected.strip()!r}\n"
                "  (rewrite with `PYTHONPATH=service:. python -m bench.quote --write`)"
            )
        opens_line = text[text.rfind("\n", 0, match.start()) + 1 : match.start()].strip() == ""
        if "\n" not in expected and opens_line:
            yield f"{where}:{line}: inline figure {name!r} opens a line; start the line with a word"


def rewrite(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match["name"]
        if name.partition(":")[0] not in FIGURES:
            return match[0]
        framed = _framed(render(name), _indent(match.string, match.start()))
        return f"<!-- figure: {name} -->{framed}<!-- /figure -->"

    return SPAN.sub(one, text)


def stale(root: Path = ROOT) -> list[str]:
    """Every problem of every doc's marked spans."""
    found: list[str] = []
    for path in docs(root):
        found += problems(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    return found


def quoted(root: Path = ROOT) -> set[str]:
    """The base names of every figure some doc quotes."""
    return {
        m["name"].partition(":")[0]
        for path in docs(root)
        for m in SPAN.finditer(path.read_text(encoding="utf-8"))
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quote", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--write", action="store_true", help="rewrite every marked span")
    parser.add_argument("--list", action="store_true", help="print every quoted figure's text")
    args = parser.parse_args(argv)
    if args.list:
        names = sorted(
            {m["name"] for p in docs() for m in SPAN.finditer(p.read_text(encoding="utf-8"))}
        )
        for name in names:
            print(f"{name}: {render(name)}")
        return 0
    if args.write:
        for path in docs():
            text = path.read_text(encoding="utf-8")
            new = rewrite(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path.relative_to(ROOT)}")
    found = stale()
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
