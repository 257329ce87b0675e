"""The agent on a real GPU node: one prepared run of a few minutes (issue 8, item 9).

1. captures the node's NVML answers with the agent's own collector
   (``python -m gpuplan.agent.telemetry.record``), so the tests can replay real
   hardware instead of the synthetic recordings;
2. runs ``gpuplan agent --once --backend nvidia`` (telemetry, benchmarks, no Redis);
3. summarises what docs/agent.md quotes: achieved vs catalog peak per dtype, H2D/D2H and
   D2D bandwidth, and which NVML fields answered.

    python -m bench.agent.agent_gpu [--timeout 900] [--out bench/results/agent_gpu.json]

Needs nvidia-ml-py and a CUDA torch. ``--nvml-recording FILE`` replays a recording
instead of the driver (a dry run of this script on a machine without a GPU).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = Path(__file__).resolve().parents[1] / "results"


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    # The caller's path too: where the image lacks a package, it travels on that path.
    path = [str(ROOT / "service"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env,
        check=False,
    )  # fmt: skip


def summarise(snapshot: dict[str, Any], capture: dict[str, Any] | None) -> dict[str, Any]:
    bench = snapshot.get("benchmark") or {}
    matmul = [
        {
            "gpu": r["gpu_index"],
            "model_name": r["model_name"],
            "dtype": r["dtype"],
            "shape": f"{r['m']}x{r['n']}x{r['k']}",
            "achieved_tflops_median": round(r["flops_per_second"] / 1e12, 1),
            "achieved_tflops_best": round(r["max_flops_per_second"] / 1e12, 1),
            "peak_tflops": None if r["peak_flops"] is None else round(r["peak_flops"] / 1e12, 1),
            "ratio_to_peak": None if r["ratio_to_peak"] is None else round(r["ratio_to_peak"], 3),
        }
        for r in bench.get("matmul", [])
    ]
    copies = [
        {
            "gpu": c["gpu_index"],
            "kind": c["kind"],
            "path": c["path"],
            "peer": c["peer_index"],
            "gb_per_second": round(c["bytes_per_second"] / 1e9, 1),
            "ratio_to_peak": None if c["ratio_to_peak"] is None else round(c["ratio_to_peak"], 3),
        }
        for c in bench.get("copy", [])
    ]
    answered: list[str] = []
    failed: dict[str, str] = {}
    for key, value in (capture or {}).get("calls", {}).items():
        function = key.split("(")[0]
        if isinstance(value, dict) and "$error" in value:
            failed.setdefault(function, value["$error"])
        elif function not in answered:
            answered.append(function)
    return {
        "node": snapshot["node"],
        "driver_version": snapshot.get("driver_version"),
        "gpus": [(g["index"], g["model_name"], g["catalog_id"]) for g in snapshot["gpus"]],
        "unsupported_fields": {g["index"]: g["unsupported_fields"] for g in snapshot["gpus"]},
        "benchmark_status": bench.get("status"),
        "benchmark_detail": bench.get("detail"),
        "benchmark_seconds": bench.get("duration_seconds"),
        "torch_version": bench.get("torch_version"),
        "skipped": bench.get("skipped", []),
        "matmul": matmul,
        "copy": copies,
        "nvml_functions_answered": sorted(answered),
        "nvml_functions_failed": dict(sorted(failed.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", type=Path, default=RESULTS / "agent_gpu.json")
    parser.add_argument("--nvml-recording", type=Path)
    args = parser.parse_args()

    capture: dict[str, Any] | None = None
    agent = ["-m", "gpuplan", "agent", "--once", "--node", os.uname().nodename.split(".")[0]]
    if args.nvml_recording is None:
        recorded = _run(["-m", "gpuplan.agent.telemetry.record"], 120)
        if recorded.returncode == 0:
            capture = json.loads(recorded.stdout)
            path = RESULTS / "nvml_capture.json"
            path.write_text(recorded.stdout, encoding="utf-8")
            print(f"NVML capture: {path} (review before committing it as a test fixture)")
        else:
            print(f"NVML capture failed: {recorded.stderr.strip()[-500:]}", file=sys.stderr)
        agent += ["--backend", "nvidia"]
    else:
        capture = json.loads(args.nvml_recording.read_text(encoding="utf-8"))
        agent += ["--nvml-recording", str(args.nvml_recording)]
    started = time.monotonic()
    done = _run(agent, args.timeout)
    if not done.stdout.strip():
        sys.exit(f"agent --once printed nothing (exit {done.returncode}): {done.stderr[-2000:]}")
    result = summarise(json.loads(done.stdout), capture)
    result["agent_exit_code"] = done.returncode
    result["agent_wall_seconds"] = round(time.monotonic() - started, 1)
    result["date"] = time.strftime("%Y-%m-%d", time.gmtime())
    result["snapshot"] = json.loads(done.stdout)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for row in result["matmul"]:
        print(f"GPU {row['gpu']} {row['dtype']:>5}: {row['achieved_tflops_median']:8.1f} TFLOP/s"
              f" of {row['peak_tflops']} ({row['ratio_to_peak']})")  # fmt: skip
    for row in result["copy"]:
        print(f"GPU {row['gpu']} {row['kind']} {row['path']}: {row['gb_per_second']} GB/s")
    print(f"benchmark {result['benchmark_status']}; written to {args.out}")


if __name__ == "__main__":
    main()
