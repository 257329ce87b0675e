"""Derive a preset's per-sample figures with gpuplan's own tracer (docs/trace.md).

    python -m bench.presets.derive_trace sdxl-unet [stable-diffusion-1.5-unet]

The same method as derive_vision.py (fp32, two AdamW steps and a no-grad forward, at
batch 8 and 16; the growth of activation and temporary bytes at the peak per sample,
and the gradients alive then), with ``gpuplan.trace`` instead of torch's MemTracker:
it traces SDXL's UNet in minutes where MemTracker's module hooks take an hour. Both
methods on the SD 1.5 UNet are recorded side by side (bench/results/vision_presets.json
and vision_presets_traced.json). Writes bench/results/vision_presets_traced.json.
"""

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from bench.presets.derive_vision import BATCHES, MODELS
from bench.presets.targets import unet
from gpuplan.trace.run import trace

RESULTS = Path(__file__).resolve().parent.parent / "results" / "vision_presets_traced.json"
UNETS = {"stable-diffusion-1.5-unet": "sd15", "sdxl-unet": "sdxl"}


def _traced(name: str, batch: int, mode: str) -> Any:
    os.environ["GPUPLAN_UNET"] = UNETS[name]
    os.environ["GPUPLAN_BATCH"] = str(batch)
    return trace(unet, mode=mode, optimizer="adamw", runtime="cpu")  # type: ignore[arg-type]


def derive(name: str) -> dict[str, Any]:
    _, size, published = MODELS[name]
    started = time.perf_counter()
    train = {b: _traced(name, b, "train") for b in BATCHES}
    infer = {b: _traced(name, b, "inference") for b in BATCHES}
    (lo, hi), span = BATCHES, BATCHES[1] - BATCHES[0]

    def dynamic(result: Any) -> int:
        return int(result.breakdown.activations_bytes + result.breakdown.temporary_bytes)

    per_sample = (dynamic(train[hi]) - dynamic(train[lo])) // span
    parameters = train[lo].parameters
    return {
        "parameters": parameters,
        "published_parameters": published,
        "reference_image_size": size,
        "training_bytes_per_sample": per_sample,
        "training_intercept_bytes": dynamic(train[lo]) - lo * per_sample,
        "inference_bytes_per_sample": (dynamic(infer[hi]) - dynamic(infer[lo])) // span,
        "gradients_at_peak": round(train[hi].breakdown.gradients_bytes / (4 * parameters), 3),
        "peaks": {f"train_{b}": train[b].peak_bytes for b in BATCHES}
        | {f"inference_{b}": infer[b].peak_bytes for b in BATCHES},
        "method": "gpuplan.trace (fake tensors, dispatcher-level allocation log)",
        "seconds": round(time.perf_counter() - started, 1),
        "torch": torch.__version__,
    }


def main() -> None:
    names = sys.argv[1:] or list(UNETS)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in names:
        results[name] = r = derive(name)
        print(
            f"{name:28s} params {r['parameters']:>13,}  train/sample {r['training_bytes_per_sample'] / 2**20:9.1f} MiB"
            f"  infer/sample {r['inference_bytes_per_sample'] / 2**20:8.1f} MiB  grads@peak {r['gradients_at_peak']:.3f}  ({r['seconds']} s)",
            flush=True,
        )
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
