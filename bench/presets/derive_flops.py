"""Forward FLOPs per sample of the vision and diffusion presets, counted.

    python -m bench.presets.derive_flops [NAME ...]

One forward of batch 1 at the reference size under ``FakeTensorMode`` with torch's
``FlopCounterMode``, which counts 2 FLOPs per multiply-add of every matmul and
convolution (and the attention kernels): the figure a roofline needs, and the one
model cards quote as GFLOPs (e.g. YOLOv5s: 16.5 GFLOPs at 640 px). Writes
bench/results/vision_flops.json.
"""

import json
import sys
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from bench.presets.derive_vision import MODELS

RESULTS = Path(__file__).resolve().parent.parent / "results" / "vision_flops.json"


def forward_flops(name: str) -> int:
    make, _, _ = MODELS[name]
    with FakeTensorMode():
        model, loss = make(1)
        # Training mode: in eval mode nn.MultiheadAttention takes a fused fast path
        # whose FLOPs the counter does not see (ViT-B/16 would read 22.5, not 35.1).
        model.train()
        counter = FlopCounterMode(display=False)
        # The math backend spells attention as matmuls the counter sees (the CPU's
        # fused SDPA kernel is not in its table).
        with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            loss(model)
    return int(counter.get_total_flops())


def main() -> None:
    names = sys.argv[1:] or list(MODELS)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    for name in names:
        results[name] = forward_flops(name)
        print(f"{name:28s} {results[name] / 1e9:10.1f} GFLOPs per sample (forward)", flush=True)
        RESULTS.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
