"""Peers side by side: llm-analysis, accelerate estimate-memory, DeepSpeed's ZeRO estimators
on memory (bench/peers/run.py); NVIDIA's AIConfigurator on serving (bench/peers/serving.py).

They run in their own venvs (``sh bench/peers/setup.sh``, default /tmp/bench-peers; another
with ``BENCH_PEERS_PYTHON``; ``sh bench/peers/setup_aiconfigurator.sh``, default
/tmp/bench-aic), never in gpuplan's environment.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = "/tmp/bench-peers/bin/python"


def run(out: Path | None = None, timeout: float = 540) -> dict[str, Any]:
    """Run bench.peers.run in the peers' venv and return its result."""
    python = os.environ.get("BENCH_PEERS_PYTHON", DEFAULT_PYTHON)
    if not Path(python).exists():
        return {"skipped": f"{python} not found: run `sh bench/peers/setup.sh` first"}
    out = out or ROOT / "bench" / "results" / "peers.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "service"), str(ROOT)]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    subprocess.run(
        [python, "-m", "bench.peers.run", "--out", str(out)],
        check=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        stdout=sys.stderr,
    )
    result: dict[str, Any] = json.loads(out.read_text())
    return result
