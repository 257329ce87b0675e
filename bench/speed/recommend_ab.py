"""Side-by-side CPU time of ``recommend()`` under two source trees (before / after a change).

    git worktree add /tmp/before <commit>
    python -m bench.speed.recommend_ab /tmp/before/service service [--rounds 3 --repeat 15]
        [--out recommend_ab.json]

Each round runs every case of :mod:`bench.speed.recommend_speed` that both trees accept under
one tree then the other (the first tree alternating from round to round), each in its own
interpreter; the figures are the median
CPU ms over the rounds, and their ratio (after / before). Alternating in one run keeps
the shared machine's load out of the ratio. Writes ``bench/results/recommend_ab.json``
(``--out``: another name, for a second change the docs quote).
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json, statistics, sys, time
import msgspec
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from bench.speed.recommend_speed import CASES
catalog = builtin_catalog()
out = {}
for name, body in CASES.items():
    try:
        request = msgspec.convert(body, RecommendRequest)
    except msgspec.ValidationError:
        continue  # a field this tree does not have
    recommend(request, catalog)
    cpu = []
    for _ in range(int(sys.argv[1])):
        start = time.process_time()
        recommend(request, catalog)
        cpu.append((time.process_time() - start) * 1e3)
    out[name] = statistics.median(cpu)
print(json.dumps(out))
"""


def _times(source: str, repeat: int) -> dict[str, float]:
    env = {"PYTHONPATH": f"{Path(source).resolve()}:{ROOT}", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(repeat)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(done.stdout))


def run(before: str, after: str, rounds: int = 3, repeat: int = 15) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(rounds):
        # Each round swaps which tree runs first, so that a drift of the machine within a
        # round (a second interpreter finding warm caches) falls on both sides alike.
        order = ("before", "after") if i % 2 == 0 else ("after", "before")
        for side in order:
            runs[side].append(_times(before if side == "before" else after, repeat))
    rows = []
    for case in runs["after"][0]:
        if case not in runs["before"][0]:
            continue
        b = statistics.median(r[case] for r in runs["before"])
        a = statistics.median(r[case] for r in runs["after"])
        rows.append(
            {
                "case": case,
                "before_cpu_ms": round(b, 2),
                "after_cpu_ms": round(a, 2),
                "ratio": round(a / b, 2),
            }
        )
        print(f"{case:<50} before {b:6.2f} ms  after {a:6.2f} ms  x{a / b:.2f}")
    return {"before": before, "after": after, "rounds": rounds, "repeat": repeat, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--out",
        default="recommend_ab.json",
        help="file name under bench/results (one per change the docs quote)",
    )
    args = parser.parse_args()
    result = run(args.before, args.after, args.rounds, args.repeat)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
