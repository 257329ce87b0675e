"""Derive the vision and diffusion presets' figures (data/models.toml) by tracing.

    python -m bench.presets.derive_vision [NAME ...]

Each model takes two AdamW training steps, and separately a no-grad forward, under
``FakeTensorMode`` (no real memory, so a 2.6B-parameter UNet traces on a laptop),
with torch's ``MemTracker`` accounting every allocation. Run at two batch sizes large
enough for the backward to hold the peak, the growth of the activation and temporary
bytes at the peak per sample is the preset's per-sample figure; the gradient bytes
alive at the training peak give ``gradients_at_peak``. fp32 throughout: the
estimator scales by the activation dtype. Attention runs through SDPA's fused CPU
kernel, which keeps what CUDA's flash kernel keeps (output and log-sum-exp).
Writes bench/results/vision_presets.json.
"""

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from bench.presets.architectures import ResNet, ViT, YoloV5

RESULTS = Path(__file__).resolve().parent.parent / "results" / "vision_presets.json"
BATCHES = (8, 16)
"""Large enough that the backward, not the optimizer step, holds the training peak."""

SD15_UNET = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": [320, 640, 1280, 1280],
    "down_block_types": ["CrossAttnDownBlock2D"] * 3 + ["DownBlock2D"],
    "up_block_types": ["UpBlock2D"] + ["CrossAttnUpBlock2D"] * 3,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
}
SDXL_UNET = {
    "sample_size": 128,
    "in_channels": 4,
    "out_channels": 4,
    "layers_per_block": 2,
    "block_out_channels": [320, 640, 1280],
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
    "transformer_layers_per_block": [1, 2, 10],
    "attention_head_dim": [5, 10, 20],
    "cross_attention_dim": 2048,
    "use_linear_projection": True,
    "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256,
    "projection_class_embeddings_input_dim": 2816,
}


def _classifier(build: Callable[[], torch.nn.Module], size: int) -> Any:
    def make(batch: int) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]:
        model = build()
        x = torch.randn(batch, 3, size, size)
        y = torch.randint(0, 1000, (batch,))
        return model, lambda m: torch.nn.functional.cross_entropy(m(x), y)

    return make


def _detector(depth: float, width: float, size: int) -> Any:
    def make(batch: int) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]:
        model = YoloV5(depth, width)
        x = torch.randn(batch, 3, size, size)
        # A loss of the detector's outputs' size; YOLOv5's own loss (box, objectness,
        # class terms over matched anchors) keeps tensors of the same order.
        return model, lambda m: sum(o.float().pow(2).mean() for o in m(x))  # type: ignore[return-value]

    return make


def _unet(config: dict[str, Any], text_dim: int, xl: bool) -> Any:
    def make(batch: int) -> tuple[torch.nn.Module, Callable[[torch.nn.Module], torch.Tensor]]:
        from diffusers import UNet2DConditionModel

        model = UNet2DConditionModel(**config)
        latent = config["sample_size"]
        x = torch.randn(batch, 4, latent, latent)
        t = torch.randint(0, 1000, (batch,))
        text = torch.randn(batch, 77, text_dim)
        extra = (
            {
                "added_cond_kwargs": {
                    "text_embeds": torch.randn(batch, 1280),
                    "time_ids": torch.randn(batch, 6),
                }
            }
            if xl
            else {}
        )
        noise = torch.randn_like(x)

        def loss(m: torch.nn.Module) -> torch.Tensor:
            out = m(x, t, encoder_hidden_states=text, **extra).sample
            return torch.nn.functional.mse_loss(out, noise)

        return model, loss

    return make


# name -> (builder, reference image side in pixels, published parameter count)
MODELS: dict[str, tuple[Any, int, int]] = {
    "resnet-50": (_classifier(lambda: ResNet((3, 4, 6, 3)), 224), 224, 25_557_032),
    "resnet-152": (_classifier(lambda: ResNet((3, 8, 36, 3)), 224), 224, 60_192_808),
    "vit-b-16": (_classifier(ViT, 224), 224, 86_567_656),
    "yolov5s": (_detector(0.33, 0.50, 640), 640, 7_235_389),
    "yolov5m": (_detector(0.67, 0.75, 640), 640, 21_190_557),
    "yolov5l": (_detector(1.00, 1.00, 640), 640, 46_563_709),
    "stable-diffusion-1.5-unet": (_unet(SD15_UNET, 768, xl=False), 512, 859_520_964),
    "sdxl-unet": (_unet(SDXL_UNET, 2048, xl=True), 1024, 2_567_463_684),
}


def _peak(tracker: MemTracker) -> dict[str, int]:
    snapshot = tracker.get_tracker_snapshot("peak")
    (device,) = snapshot
    return {str(k).split(".")[-1]: v for k, v in snapshot[device].items()}


def trace(make: Any, batch: int, training: bool) -> tuple[dict[str, int], int]:
    with FakeTensorMode():
        torch.manual_seed(0)
        model, loss = make(batch)
        parameters = sum(p.numel() for p in model.parameters())
        tracker = MemTracker()
        if training:
            model.train()
            opt = torch.optim.AdamW(model.parameters(), foreach=False)
            tracker.track_external(model, opt)
            with tracker:
                for step in range(2):
                    if step == 1:
                        tracker.reset_mod_stats()
                    loss(model).backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
        else:
            model.eval()
            tracker.track_external(model)
            with tracker, torch.no_grad():
                loss(model)
    return _peak(tracker), parameters


def figures(
    name: str,
    parameters: int,
    train: dict[int, tuple[int, int]],
    infer: dict[int, int],
) -> dict[str, Any]:
    """A preset's figures from traces at BATCHES: ``train`` maps a batch to the
    (activation + temporary, gradient) bytes at the training peak, ``infer`` to the
    activation + temporary bytes at the forward's."""
    _, size, published = MODELS[name]
    (lo, hi), span = BATCHES, BATCHES[1] - BATCHES[0]
    per_sample = (train[hi][0] - train[lo][0]) // span
    return {
        "parameters": parameters,
        "published_parameters": published,
        "reference_image_size": size,
        "training_bytes_per_sample": per_sample,
        "training_intercept_bytes": train[lo][0] - lo * per_sample,
        "inference_bytes_per_sample": (infer[hi] - infer[lo]) // span,
        "gradients_at_peak": round(train[hi][1] / (4 * parameters), 3),
        "torch": torch.__version__,
    }


def derive(name: str) -> dict[str, Any]:
    make, _, _ = MODELS[name]
    started = time.perf_counter()
    train = {b: trace(make, b, True) for b in BATCHES}
    infer = {b: trace(make, b, False) for b in BATCHES}
    return {
        **figures(
            name,
            train[BATCHES[0]][1],
            {b: (peak["ACT"] + peak["TEMP"], peak["GRAD"]) for b, (peak, _) in train.items()},
            {b: peak["ACT"] + peak["TEMP"] for b, (peak, _) in infer.items()},
        ),
        "training_peaks": {b: train[b][0] for b in BATCHES},
        "inference_peaks": {b: infer[b][0] for b in BATCHES},
        "seconds": round(time.perf_counter() - started, 1),
    }


def derive_all(names: list[str], derive_one: Any, results_file: Path) -> None:
    """Derive each name, print its line, and write the results after each one: a long
    trace (SDXL) must not cost the others' results."""
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    for name in names:
        results[name] = r = derive_one(name)
        print(
            f"{name:28s} params {r['parameters']:>13,}  train/sample {r['training_bytes_per_sample'] / 2**20:9.1f} MiB"
            f"  infer/sample {r['inference_bytes_per_sample'] / 2**20:8.1f} MiB  grads@peak {r['gradients_at_peak']:.3f}  ({r['seconds']} s)",
            flush=True,
        )
        results_file.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


def main() -> None:
    derive_all(sys.argv[1:] or list(MODELS), derive, RESULTS)


if __name__ == "__main__":
    main()
