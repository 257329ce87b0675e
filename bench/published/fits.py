"""Every published training run ran: its own layout fit its GPU. How often does the
memory estimate say it does not?

    python -m bench.published.fits [--write]

A run in ``bench/published/runs.toml`` is a measurement of a job that ran, so its layout
fit the GPU it ran on: the plan's ``fits`` verdict (``required_bytes`` at 95% confidence
within the usable memory) should be true for nearly all of them. A "does not fit" here is
a false refusal a user would meet as the answer to "does this job fit?", and the search
(``layout: search``) leaves such a layout out. Each row gives the verdict, the bytes the
verdict compares (``required``: the high end of the device interval) and the estimate's
centre (``device``: what nvidia-smi would show), so that a refusal by the interval's width
tells apart from one by the estimate itself. Written to ``bench/results/published_fits.json``
with ``--write``.
"""

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import msgspec

from bench.published.runs import load, regime
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.core.recommend import RecommendRequest, recommend

RESULTS = Path(__file__).resolve().parents[1] / "results" / "published_fits.json"
GIB = 2**30


def row(run: dict[str, Any]) -> dict[str, Any]:
    """One run's verdict at its own layout, and the estimate's centre."""
    catalog = builtin_catalog()
    request = run["request"]
    top = recommend(msgspec.convert(request, RecommendRequest), catalog).recommendations[0]
    centre = estimate(
        msgspec.convert(
            {"model": request["model"], "workload": request["workload"], "gpu": run["gpu"]},
            EstimateRequest,
        ),
        catalog,
    )
    usable = top.usable_memory_bytes
    return {
        "id": run["id"],
        "source_id": run["source_id"],
        "gpu": run["gpu"],
        **regime(run),
        "fits": top.fits,
        "required_gib": round(top.required_bytes_per_gpu / GIB, 1),
        "device_gib": round(centre.device_bytes / GIB, 1),
        "usable_gib": round(usable / GIB, 1),
        "required_over_usable": round(top.required_bytes_per_gpu / usable, 3),
        "device_over_usable": round(centre.device_bytes / usable, 3),
        "peak_phase": centre.peak_phase,
    }


def evaluate() -> dict[str, Any]:
    rows = [row(run) for run in load("training")]
    refused = [r for r in rows if not r["fits"]]
    by_framework: dict[str, dict[str, int]] = {}
    for r in rows:
        entry = by_framework.setdefault(r["framework"], {"runs": 0, "refused": 0})
        entry["runs"] += 1
        entry["refused"] += 0 if r["fits"] else 1
    return {
        "summary": {
            "runs": len(rows),
            "refused": len(refused),
            "refused_at_centre": sum(1 for r in rows if r["device_over_usable"] > 1),
            "median_device_over_usable": statistics.median(r["device_over_usable"] for r in rows),
            "by_framework": by_framework,
        },
        "rows": rows,
    }


def report(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        f"{s['refused']} of {s['runs']} published training runs refused at their own layout "
        f"(the estimate's centre alone over the usable memory: {s['refused_at_centre']}); "
        f"median centre / usable {s['median_device_over_usable']:.2f}",
    ]
    for name, entry in sorted(s["by_framework"].items()):
        lines.append(f"  {name:<10} {entry['refused']:3} of {entry['runs']}")
    for r in sorted(result["rows"], key=lambda r: -r["required_over_usable"]):
        if not r["fits"]:
            lines.append(
                f"  {r['id']:<58} {r['required_gib']:7.1f} GiB required, "
                f"{r['device_gib']:7.1f} centre, {r['usable_gib']:6.1f} usable  ({r['peak_phase']})"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {RESULTS.name}")
    args = parser.parse_args()
    result = evaluate()
    print(report(result))
    if args.write:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
