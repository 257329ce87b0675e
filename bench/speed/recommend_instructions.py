"""Instructions per ``recommend()`` under two source trees, counted by valgrind: a
measure of a change that the shared machine's load cannot move.

    git worktree add /tmp/before <commit>
    python -m bench.speed.recommend_instructions /tmp/before/service service [--repeat 3]
        [--only SUBSTRING] [--out recommend_instructions.json]

On this project's shared 2-core VM a case's median time moves by 10-20% from one
interpreter to the next (the same tree, minutes apart), more than most single changes
save, so ``recommend_ab``'s ratios need many rounds. An instruction count is the same on
every run: cachegrind (``valgrind --tool=cachegrind --cache-sim=no``) counts what the
interpreter executes for each case once warm, as the difference between a run of
``repeat`` more requests and a run of none, divided by ``repeat``. It is not time
(a cache miss costs more than an add), so the timings stay the figure the goal is set
in; across this suite a request took 0.12-0.15 ms per million instructions in the
committed runs. Needs valgrind (Debian: ``apt-get install valgrind``).
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.speed.recommend_speed import CASES

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys
import msgspec
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend import option
from bench.speed.recommend_speed import CASES
catalog = builtin_catalog()
request = msgspec.convert(CASES[sys.argv[1]], RecommendRequest)
recommend(request, catalog)
for _ in range(int(sys.argv[2])):
    # The keys' rounding memo outlives a request: cleared, so that a repeated request is
    # not answered from the one before (a tree without it has nothing to clear).
    getattr(option._sig, "cache_clear", lambda: None)()
    recommend(request, catalog)
"""

REFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def _instructions(source: str, case: str, repeat: int) -> int:
    """Instructions of the whole interpreter run: warm-up plus ``repeat`` requests."""
    # A fixed hash seed: the order of a set of strings, and the work that follows it,
    # is then the same in every run.
    env = {
        "PYTHONPATH": f"{Path(source).resolve()}:{ROOT}",
        "PATH": "/usr/bin:/bin",
        "PYTHONHASHSEED": "0",
    }
    done = subprocess.run(
        [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            "-c",
            CHILD,
            case,
            str(repeat),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found = REFS.search(done.stderr)
    assert found, done.stderr[-2000:]
    return int(found.group(1).replace(",", ""))


def per_request(source: str, case: str, repeat: int) -> float:
    """Instructions of one warm request: ``repeat`` more requests' count over a run of
    none, over ``repeat``."""
    none = _instructions(source, case, 0)
    return (_instructions(source, case, repeat) - none) / repeat


def _compile(source: str) -> None:
    """Byte-compile a tree first: a module changed since its last run is compiled by the
    next interpreter that imports it, and a count of that run would include it."""
    for tree in (Path(source).resolve(), ROOT / "bench"):
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree)], check=True)


def run(before: str, after: str, repeat: int = 3, only: str = "") -> dict[str, Any]:
    rows = []
    for case in CASES:
        if only not in case:
            continue
        _compile(before)  # before each case: a tree edited during a run is compiled here
        _compile(after)
        b, a = per_request(before, case, repeat), per_request(after, case, repeat)
        rows.append(
            {
                "case": case,
                "before_minstr": round(b / 1e6, 1),
                "after_minstr": round(a / 1e6, 1),
                "ratio": round(a / b, 3),
            }
        )
        print(f"{case:<70} {b / 1e6:7.1f} M  {a / 1e6:7.1f} M  x{a / b:.3f}", flush=True)
    return {"before": before, "after": after, "repeat": repeat, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="", help="the cases whose name contains this")
    parser.add_argument("--out", default="recommend_instructions.json")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (Debian: apt-get install valgrind)")
    result = run(args.before, args.after, args.repeat, args.only)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
