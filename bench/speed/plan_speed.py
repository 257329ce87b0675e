"""In-process speed of ``check()`` on every plan file in examples/.

    python -m bench.speed.plan_speed [--repeat 30]

A plan runs the recommendation over the whole catalog, a second one narrowed to the
``fits`` GPU (for the cost and time targets), the sizing at the ``fits`` count, the
MIG fit of every MIG-capable GPU and one estimate. Warm: the catalog and data files
are loaded once, as in a running server. Writes ``bench/results/plan_speed.json``;
docs/ci.md quotes it.
"""

import argparse
import json
import os
import platform
from pathlib import Path

import msgspec

from bench.speed.recommend_speed import _time
from gpuplan.config.documents import read_document
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.ci import CiPlan, check

RESULTS = Path(__file__).resolve().parents[1] / "results"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    catalog = builtin_catalog()
    rows = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        request = msgspec.convert(read_document(path), CiPlan)
        report = check(request, catalog)  # warm-up
        median, p95, fastest, cpu = _time(lambda r=request: check(r, catalog), args.repeat)
        rows.append(
            {
                "plan": path.name,
                "targets": len(report.verdicts),
                "passed": report.passed,
                "median_ms": round(median, 2),
                "p95_ms": round(p95, 2),
                "min_ms": round(fastest, 2),
                "median_cpu_ms": round(cpu, 2),
            }
        )
        print(f"{path.name:<34} wall {median:6.2f} ms (p95 {p95:6.2f}) cpu {cpu:6.2f} ms")
    report_doc = {
        "load_average": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": "shared 2-core development VM (other jobs running)",
        "repeat": args.repeat,
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "plan_speed.json").write_text(json.dumps(report_doc, indent=2) + "\n")


if __name__ == "__main__":
    main()
