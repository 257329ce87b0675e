"""Derive a preset's per-sample figures with gpuplan's own tracer (docs/trace.md).

    python -m bench.presets.derive_trace sdxl-unet [stable-diffusion-1.5-unet]

The same method as derive_vision.py (fp32, two AdamW steps and a no-grad forward, at
batch 8 and 16; the growth of activation and temporary bytes at the peak per sample,
and the gradients alive then), with ``gpuplan.trace`` instead of torch's MemTracker:
it traces SDXL's UNet in minutes where MemTracker's module hooks take an hour. Both
methods on the SD 1.5 UNet are recorded side by side (bench/results/vision_presets.json
and vision_presets_traced.json). Writes bench/results/vision_presets_traced.json.
"""

import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.presets.derive_vision import BATCHES, derive_all, figures
from bench.presets.targets import unet
from gpuplan.trace.run import trace

RESULTS = Path(__file__).resolve().parent.parent / "results" / "vision_presets_traced.json"
UNETS = {"stable-diffusion-1.5-unet": "sd15", "sdxl-unet": "sdxl"}


def _traced(name: str, batch: int, mode: str) -> Any:
    os.environ["GPUPLAN_UNET"] = UNETS[name]
    os.environ["GPUPLAN_BATCH"] = str(batch)
    return trace(unet, mode=mode, optimizer="adamw", runtime="cpu")  # type: ignore[arg-type]


def derive(name: str) -> dict[str, Any]:
    started = time.perf_counter()
    train = {b: _traced(name, b, "training") for b in BATCHES}
    infer = {b: _traced(name, b, "inference") for b in BATCHES}

    def dynamic(result: Any) -> int:
        return int(result.breakdown.activations_bytes + result.breakdown.temporary_bytes)

    return {
        **figures(
            name,
            train[BATCHES[0]].parameters,
            {b: (dynamic(r), r.breakdown.gradients_bytes) for b, r in train.items()},
            {b: dynamic(r) for b, r in infer.items()},
        ),
        "peaks": {f"train_{b}": train[b].peak_bytes for b in BATCHES}
        | {f"inference_{b}": infer[b].peak_bytes for b in BATCHES},
        "method": "gpuplan.trace (fake tensors, dispatcher-level allocation log)",
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    derive_all(sys.argv[1:] or list(UNETS), derive, RESULTS)


if __name__ == "__main__":
    main()
