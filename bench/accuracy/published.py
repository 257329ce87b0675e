"""The estimator against published real-GPU memory figures, each in its own measure.

    PYTHONPATH=service:. python -m bench.accuracy.published

The cases are data (bench/accuracy/published.toml): each carries its source (a
repository file at a commit, a paper table, an issue), the exact quote, and which
measure the figure is: ``max_memory_allocated``, ``max_memory_reserved``,
``nvidia_smi``, or optimum's allocated-plus-outside-PyTorch. The estimate's figure for
that measure is compared; nothing is fitted to these cases. A case whose figure is
decided by something a request cannot express says so (``excluded``, with the reason
and its source) and stays in the table, outside the statistics. Writes
bench/results/published.json; docs/accuracy.md quotes it.
"""

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from bench.accuracy.stats import error_stats
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse

HERE = Path(__file__).resolve().parent
CASES = HERE / "published.toml"
RESULTS = HERE.parent / "results" / "published.json"


def figure(r: EstimateResponse, measure: str) -> int:
    """The estimate's figure for what the source measured."""
    b = r.breakdown
    if measure == "max_memory_allocated":
        return r.peak_bytes  # the tensors and the cuBLAS workspaces
    if measure == "max_memory_reserved":
        return r.reserved_bytes
    if measure == "nvidia_smi":
        return r.device_bytes
    if measure == "allocated_plus_outside":
        return r.peak_bytes + b.context_bytes + b.communication_buffers_bytes
    raise ValueError(f"unknown measure {measure!r}")


def cases() -> list[dict[str, Any]]:
    return list(tomllib.loads(CASES.read_text(encoding="utf-8"))["case"])


def run() -> dict[str, Any]:
    catalog = builtin_catalog()
    rows = []
    for case in cases():
        body = dict(case["request"])
        if case.get("gpu"):
            body.setdefault("gpu", case["gpu"])
        result = estimate(msgspec.convert(body, EstimateRequest), catalog)
        estimated = figure(result, case["measure"])
        rows.append(
            {
                "id": case["id"],
                "excluded": case.get("excluded", ""),
                "measure": case["measure"],
                "published_bytes": case["bytes"],
                "estimated_bytes": estimated,
                "error": estimated / case["bytes"] - 1,
                "peak_phase": result.peak_phase,
            }
        )
    errors = [r["error"] for r in rows if not r["excluded"]]
    summary = {**error_stats(errors), "excluded": sum(1 for r in rows if r["excluded"])}
    return {"summary": summary, "rows": rows}


def table(result: dict[str, Any]) -> str:
    """The suite as the markdown table docs/accuracy.md quotes."""
    by_id = {c["id"]: c for c in cases()}
    lines = [
        "| case | measure | published GB | estimated GB | error | source |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in result["rows"]:
        source = by_id[r["id"]]["source"].split(",")[0]
        error = f"{r['error']:+.1%}" + (" (excluded)" if r["excluded"] else "")
        lines.append(
            f"| {r['id']} | {r['measure']} | {r['published_bytes'] / 1e9:.2f} | "
            f"{r['estimated_bytes'] / 1e9:.2f} | {error} | {source} |"
        )
    s = result["summary"]
    lines += [
        "",
        f"{s['cases']} counted cases ({s['excluded']} excluded, reasons in "
        f"bench/accuracy/published.toml): median absolute error {s['median_abs_error']:.1%}, "
        f"worst {s['max_abs_error']:.1%}, most low {s['most_low']:+.1%}, "
        f"{s['low_by_more_than_5pct']} more than 5% low.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    result = run()
    for r in result["rows"]:
        print(
            f"{r['id']:40s} {r['measure']:24s} published {r['published_bytes'] / 1e9:7.2f} GB  "
            f"estimated {r['estimated_bytes'] / 1e9:7.2f} GB  {r['error']:+7.1%}  ({r['peak_phase']})"
            + ("  [excluded]" if r["excluded"] else "")
        )
    print(json.dumps(result["summary"]))
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    if "--table" in sys.argv:
        print(table(result))


if __name__ == "__main__":
    main()
