"""The compiled build of gpuplan, as the API image ships it, beside the pure-Python one.

    python -m bench.speed.compiled [--rounds 20 --repeat 5] [--out recommend_compiled.json]

:func:`build` builds the package with ``GPUPLAN_COMPILE=1`` (setup.py: mypyc compiles
the modules ``[tool.gpuplan] compiled`` in pyproject.toml lists) from a copy of the
packaging files, so the checkout's own tree stays pure Python, and unpacks the wheel: a
folder to put first on ``PYTHONPATH``. The module's run times every
:mod:`bench.speed.recommend_speed` case under the checkout's ``service/`` and under that
build, one interpreter each, interleaved case by case (:func:`run`), and writes
``bench/results/recommend_compiled.json``. Needs a C compiler and Python's headers, as
mypyc does, and mypy (the dev extra).
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

from bench.speed.recommend_speed import reference_loop_ms

RESULTS = Path(__file__).resolve().parents[1] / "results"
ROOT = Path(__file__).resolve().parents[2]

PACKAGING = ("pyproject.toml", "setup.py", "README.md")
"""What the build reads besides ``service/``."""

LOADED = """
import importlib, importlib.machinery, sys
for name in sys.argv[1:]:
    if isinstance(importlib.import_module(name).__loader__, importlib.machinery.ExtensionFileLoader):
        print(name)
"""
"""Prints which of the named modules were loaded from a C extension."""


def compiled_modules() -> list[str]:
    """Dotted names of the modules the compiled build compiles."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [
        path.removesuffix(".py").replace("/", ".") for path in config["tool"]["gpuplan"]["compiled"]
    ]


def build(dest: Path, opt_level: str = "3") -> Path:
    """Build the compiled wheel in a scratch copy of the sources and unpack it under
    ``dest``; returns the folder to import ``gpuplan`` from. ``opt_level`` is the C
    compiler's (``-O``; the image's is 3): mypyc writes the same C at every level, and
    IEEE arithmetic without ``-ffast-math`` gives the same answers at each. On a 2-core
    machine (2026-12-06) the build took 223 s at 3 and 133 s at 0, about 90 s of it
    mypyc's own type check and code generation."""
    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "src"
    # No byte code, metadata or extension of an earlier build goes into the copy.
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so")
    shutil.copytree(ROOT / "service", src / "service", ignore=skip)
    for name in PACKAGING:
        shutil.copy2(ROOT / name, src / name)
    wheels = dest / "wheels"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(wheels),
            str(src),
        ],
        env={**os.environ, "GPUPLAN_COMPILE": "1", "GPUPLAN_COMPILE_OPT": opt_level},
        cwd=src,
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"the compiled build failed:\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
        )
    (wheel,) = wheels.glob("gpuplan-*.whl")
    site = dest / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    return site


CHILD = """
import json, sys, time
import msgspec
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from bench.speed.recommend_speed import CASES
catalog = builtin_catalog()
requests = {name: msgspec.convert(body, RecommendRequest) for name, body in CASES.items()}
for request in requests.values():
    recommend(request, catalog)
print(json.dumps(list(requests)), flush=True)
for line in sys.stdin:
    name, repeat = json.loads(line)
    cpu = []
    for _ in range(repeat):
        start = time.process_time()
        recommend(requests[name], catalog)
        cpu.append((time.process_time() - start) * 1e3)
    print(json.dumps(cpu), flush=True)
"""
"""A timing server: warms every case, names them, then times the case each line asks for."""


class _Timer:
    """One interpreter that imports ``gpuplan`` from ``tree`` and times cases on request."""

    def __init__(self, tree: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            env={"PYTHONPATH": f"{tree}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.cases: list[str] = json.loads(self._line())

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline()

    def time(self, case: str, repeat: int) -> list[float]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps([case, repeat]) + "\n")
        self.process.stdin.flush()
        return list(json.loads(self._line()))

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


def run(rounds: int = 20, repeat: int = 5) -> dict[str, Any]:
    """Time every case under the pure tree and the compiled build, interleaved finely: in
    each round each case runs ``repeat`` times under one tree, then under the other (the
    first alternating), so that the shared machine's bursts of load, seconds long, fall
    on both alike. Figures: the median of the ``rounds x repeat`` samples of each."""
    with tempfile.TemporaryDirectory(prefix="gpuplan-compiled-") as tmp:
        site = build(Path(tmp))
        loaded = subprocess.run(
            [sys.executable, "-c", LOADED, *compiled_modules()],
            env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        timers = {"pure": _Timer(ROOT / "service"), "compiled": _Timer(site)}
        try:
            samples: dict[str, dict[str, list[float]]] = {side: {} for side in timers}
            for i in range(rounds):
                for case in timers["pure"].cases:
                    order = ("pure", "compiled") if i % 2 == 0 else ("compiled", "pure")
                    for side in order:
                        samples[side].setdefault(case, []).extend(timers[side].time(case, repeat))
        finally:
            for timer in timers.values():
                timer.close()
    rows = []
    for case in timers["pure"].cases:
        pure = statistics.median(samples["pure"][case])
        compiled = statistics.median(samples["compiled"][case])
        rows.append(
            {
                "case": case,
                "pure_cpu_ms": round(pure, 2),
                "compiled_cpu_ms": round(compiled, 2),
                "ratio": round(compiled / pure, 2),
            }
        )
        print(
            f"{case:<70} pure {pure:6.2f} ms  compiled {compiled:6.2f} ms  x{compiled / pure:.2f}"
        )
    return {
        "pure": "the checkout's service/ (an editable install's tree)",
        "compiled": "the wheel GPUPLAN_COMPILE=1 builds (the API image's)",
        "compiled_modules": loaded,
        "rounds": rounds,
        "repeat": repeat,
        "load_average": list(os.getloadavg()),
        "reference_loop_cpu_ms": reference_loop_ms(),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="recommend_compiled.json")
    args = parser.parse_args()
    result = run(args.rounds, args.repeat)
    (RESULTS / args.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
