"""wrk, as the HTTP benchmarks drive it: one run on loopback, and the figures of its report.

bench/service/api_overhead.py and bench/service/asgi_servers.py both measure with one wrk thread at a
fixed concurrency and read the same four figures from its ``--latency`` report, so
the command, its options and the reading live here once.
"""

import argparse
import re
import subprocess

_UNIT = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _seconds(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNIT[unit]


def arguments(description: str, *, seconds: float, connections: int) -> argparse.Namespace:
    """The command line of a wrk benchmark: ``--seconds`` a run (parsed as the type of the
    script's default), ``--rounds`` (default 3) and ``--connections``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=type(seconds), default=seconds)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=connections)
    return parser.parse_args()


def run(port: int, path: str, seconds: float, connections: int, script: str | None = None) -> str:
    """The report of one wrk run (one thread, whole seconds, at least one) against
    ``http://127.0.0.1:{port}{path}``, with the Lua ``script`` when given."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    if script:
        command += ["-s", script]
    return subprocess.run(
        [*command, f"http://127.0.0.1:{port}{path}"],
        capture_output=True, text=True, check=True, timeout=seconds + 30,
    ).stdout  # fmt: skip


def figures(report: str) -> dict[str, float]:
    """Requests/s, p50 and p99 latency in seconds, and the count of non-2xx answers."""
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", report).group(1))  # type: ignore[union-attr]
    p50 = _seconds(re.search(r"^\s+50%\s+(\S+)", report, re.M).group(1))  # type: ignore[union-attr]
    p99 = _seconds(re.search(r"^\s+99%\s+(\S+)", report, re.M).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", report)
    return {
        "rps": rps,
        "p50_s": p50,
        "p99_s": p99,
        "non_2xx": float(errors.group(1)) if errors else 0.0,
    }
