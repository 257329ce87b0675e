"""Vision presets against real CPU steps: the traced per-sample figures, checked.

    python -m bench.accuracy.vision_real

ResNet-50 and YOLOv5s (bench/presets/architectures.py) take two real AdamW steps
on this CPU at their reference sizes; the peak of allocated bytes (profiler memory
events, bench/accuracy/measure.py) is compared with the estimate for the preset
(runtime cpu, fp32). Writes bench/results/accuracy_vision.json.
"""

import json
from pathlib import Path
from typing import Any

import msgspec
import torch

from bench.accuracy.measure import measure_training
from bench.presets.architectures import ResNet, YoloV5
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest

RESULTS = Path(__file__).resolve().parent.parent / "results" / "accuracy_vision.json"


class _Loss(torch.nn.Module):
    """Wraps a model so that ``model(**batch).loss`` is its training loss."""

    def __init__(self, model: torch.nn.Module, kind: str) -> None:
        super().__init__()
        self.model, self.kind = model, kind

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:
        out = self.model(x)
        if self.kind == "classifier":
            loss = torch.nn.functional.cross_entropy(out, y)
        else:
            loss = sum(o.float().pow(2).mean() for o in out)
        return type("Out", (), {"loss": loss})()


CASES = [
    ("resnet-50", lambda: ResNet((3, 4, 6, 3)), "classifier", 224, 8),
    ("yolov5s", lambda: YoloV5(0.33, 0.50), "detector", 640, 4),
]


def main() -> None:
    torch.set_num_threads(2)
    rows = []
    for name, build, kind, size, batch in CASES:

        def make_batch(size: int = size, batch: int = batch) -> dict[str, torch.Tensor]:
            return {"x": torch.randn(batch, 3, size, size), "y": torch.randint(0, 1000, (batch,))}

        measured = measure_training(
            lambda build=build, kind=kind: _Loss(build(), kind),
            make_batch,
            lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4),
        )
        body = {"model": {"name": name}, "workload": {"mode": "training", "batch_size": batch,
                "image_size": size, "precision": "fp32"}, "runtime": "cpu"}  # fmt: skip
        est = estimate(msgspec.convert(body, EstimateRequest), builtin_catalog()).peak_bytes
        error = (est - measured.peak_bytes) / measured.peak_bytes
        rows.append({"case": f"{name} fp32 batch {batch} at {size} px", "measured_bytes": measured.peak_bytes,
                     "estimated_bytes": est, "error": error})  # fmt: skip
        print(
            f"{rows[-1]['case']:36s} measured {measured.peak_bytes / 2**20:8.1f} MiB  estimated {est / 2**20:8.1f} MiB  error {error:+.2%}",
            flush=True,
        )
    RESULTS.write_text(json.dumps({"torch": torch.__version__, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
