"""Convolutional nets traced with and without kernel probes, against real CPU steps.

    python -m bench.trace.trace_probes

ResNet-50 and YOLOv5s (bench/presets/architectures.py) take two steps for real on
this CPU (AdamW training in fp32 and under bf16 autocast, and inference) and are
traced on fake tensors (runtime cpu) twice: with kernel probes (the default: each
distinct oneDNN convolution call run once for real to measure its in-kernel
scratch) and without (``probe_budget_bytes=0``). The three peaks, the errors and the
trace times, with the CPU's instruction set and thread count, which decide oneDNN's
layouts. Writes bench/results/trace_probes.json.
"""

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from bench.accuracy.measure_target import measure_target
from bench.presets.architectures import ResNet, YoloV5
from gpuplan.trace.run import trace

RESULTS = Path(__file__).resolve().parents[1] / "results" / "trace_probes.json"

MODELS: dict[str, tuple[Callable[[], torch.nn.Module], int, int]] = {
    # name: (model, image side, batch); small enough for two real steps on 2 cores
    "resnet-50": (lambda: ResNet((3, 4, 6, 3)), 128, 4),
    "yolov5s": (lambda: YoloV5(0.33, 0.50), 256, 2),
}
RUNS = [("training", "adamw", "none"), ("training", "adamw", "bf16"), ("inference", "none", "none")]


def _target(name: str) -> Callable[[], Any]:
    make, side, batch = MODELS[name]

    def build() -> Any:
        torch.manual_seed(0)
        return make(), (torch.randn(batch, 3, side, side),)

    return build


def _isa() -> str:
    flags = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line
                break
    except OSError:
        return "?"
    for isa in ("amx_tile", "avx512_bf16", "avx512f", "avx2"):
        if f" {isa}" in flags:
            return isa
    return "older than avx2"


def run() -> dict[str, Any]:
    rows = []
    for name in MODELS:
        build = _target(name)
        for mode, optimizer, amp in RUNS:
            measured = measure_target(build, mode=mode, optimizer=optimizer, amp=amp)
            row: dict[str, Any] = {
                "model": name,
                "mode": mode,
                "amp": amp,
                "measured_bytes": measured.peak_bytes,
            }
            for label, budget in (("probed", 1 << 30), ("unprobed", 0)):
                started = time.perf_counter()
                traced = trace(
                    build,
                    mode=mode,  # type: ignore[arg-type]
                    optimizer=optimizer,  # type: ignore[arg-type]
                    amp=amp,  # type: ignore[arg-type]
                    runtime="cpu",
                    probe_budget_bytes=budget,
                )
                row[f"{label}_bytes"] = traced.peak_bytes
                row[f"{label}_error"] = (
                    traced.peak_bytes - measured.peak_bytes
                ) / measured.peak_bytes
                row[f"{label}_seconds"] = round(time.perf_counter() - started, 2)
            rows.append(row)
            print(
                f"{name:10} {mode:9} {amp:4}  measured {row['measured_bytes']:>12,}  "
                f"probed {row['probed_error']:+.4%} ({row['probed_seconds']} s)  "
                f"unprobed {row['unprobed_error']:+.4%} ({row['unprobed_seconds']} s)",
                flush=True,
            )
    summary = {
        label: {
            "median_abs_error": statistics.median(abs(r[f"{label}_error"]) for r in rows),
            "max_abs_error": max(abs(r[f"{label}_error"]) for r in rows),
            "median_seconds": statistics.median(r[f"{label}_seconds"] for r in rows),
        }
        for label in ("probed", "unprobed")
    }
    return {
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "isa": _isa(),
        "threads": torch.get_num_threads(),
        "summary": summary,
        "rows": rows,
    }


def main() -> None:
    result = run()
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
