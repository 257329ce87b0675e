"""The long schema-fuzzing run: tests/test_fuzz.py with many more examples.

    python -m bench.service.fuzz [--examples 2000] [--trace-examples 20] [--timeout 1800]

Runs the same schemathesis tests as the default suite (every operation of
``api/openapi.yaml`` against the app in-process, a Redis on 127.0.0.1:6379 for the
fleet routes), with ``--examples`` generated requests per operation instead of 100, and
a random seed per run (the suite's run is derandomized), so each run explores new
inputs. Bounded by ``--timeout``. Writes bench/results/fuzz.json: examples, seconds,
tests passed and failed, and the failures' summaries.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "fuzz.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--trace-examples", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args()
    env = {
        **os.environ,
        "GPUPLAN_FUZZ_EXAMPLES": str(args.examples),
        "GPUPLAN_FUZZ_TRACE_EXAMPLES": str(args.trace_examples),
        "GPUPLAN_FUZZ_RANDOM": "1",
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "service"), os.environ.get("PYTHONPATH")) if p
        ),
    }
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_fuzz.py"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.timeout, check=False,
        )  # fmt: skip
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = (
            (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        )
        code = 124
    seconds = time.perf_counter() - started
    summary = re.findall(r"(\d+) (passed|failed|error)", output)
    counts = {kind: int(n) for n, kind in summary}
    failures = re.findall(r"^FAILED (.+)$", output, re.MULTILINE)
    result = {
        "examples_per_operation": args.examples,
        "trace_examples": args.trace_examples,
        "seconds": round(seconds, 1),
        "exit_code": code,
        "tests": counts,
        "failures": failures,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if code != 0:
        # The failures' summaries (operation, check, status) and the tail of the report.
        keep = [line for line in output.splitlines() if len(line) < 400]
        print("\n".join(keep[-200:]), file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
