"""Print data/models.toml entries for the vision presets from the derived figures.

python -m bench.presets.to_toml >> service/gpuplan/core/memory/data/models.toml
"""

import json

from bench.presets.derive_flops import RESULTS as FLOPS
from bench.presets.derive_trace import RESULTS as TRACED
from bench.presets.derive_vision import RESULTS

KIND = {"stable-diffusion-1.5-unet": "diffusion", "sdxl-unet": "diffusion"}
SOURCES = {
    "resnet-50": "He et al. 2016 (ResNet-50, v1.5 as torchvision builds it); 25,557,032 params (torchvision ResNet50_Weights.IMAGENET1K_V1)",
    "resnet-152": "He et al. 2016 (ResNet-152, v1.5 as torchvision builds it); 60,192,808 params (torchvision ResNet152_Weights.IMAGENET1K_V1)",
    "vit-b-16": "Dosovitskiy et al. 2021 (ViT-B/16, 224 px, 1000 classes); 86,567,656 params (torchvision ViT_B_16_Weights.IMAGENET1K_V1)",
    "yolov5s": "Ultralytics YOLOv5 v6 yolov5s.yaml (depth 0.33, width 0.50, 80 classes); 7.2M params (Ultralytics README model table)",
    "yolov5m": "Ultralytics YOLOv5 v6 yolov5m.yaml (depth 0.67, width 0.75, 80 classes); 21.2M params (Ultralytics README model table)",
    "yolov5l": "Ultralytics YOLOv5 v6 yolov5l.yaml (depth 1.0, width 1.0, 80 classes); 46.5M params (Ultralytics README model table)",
    "stable-diffusion-1.5-unet": "runwayml/stable-diffusion-v1-5 unet/config.json (UNet2DConditionModel, 512 px images = 64x64 latents, CLIP ViT-L text states); 859,520,964 params (860M per the model card)",
    "sdxl-unet": "stabilityai/stable-diffusion-xl-base-1.0 unet/config.json (1024 px images = 128x128 latents); 2,567,463,684 params (2.6B, Podell et al. 2023)",
}


def main() -> None:
    # MemTracker figures where derive_vision.py produced them; gpuplan.trace's for the
    # rest (SDXL, which MemTracker's hooks make an hour-long trace).
    traced = json.loads(TRACED.read_text()) if TRACED.exists() else {}
    results = {**traced, **json.loads(RESULTS.read_text())}
    flops = json.loads(FLOPS.read_text())
    for name, r in results.items():
        assert (
            r["parameters"] == r["published_parameters"]
            or abs(r["parameters"] - r["published_parameters"]) / r["published_parameters"] < 0.01
        ), name
        print(f'\n[models."{name}"]')
        print(f'kind = "{KIND.get(name, "vision")}"')
        print(f'source = "{SOURCES[name]}"')
        print(f"parameters = {r['parameters']:_}")
        print(f'[models."{name}".activations]')
        print(f"reference_image_size = {r['reference_image_size']}")
        print(f"training_bytes_per_sample = {r['training_bytes_per_sample']:_}")
        print(f"inference_bytes_per_sample = {r['inference_bytes_per_sample']:_}")
        print(f"gradients_at_peak = {r['gradients_at_peak']}")
        print(f"forward_flops_per_sample = {flops[name]:_}")
        tool = (
            "gpuplan.trace (bench/presets/derive_trace.py)"
            if "method" in r
            else "torch MemTracker (bench/presets/derive_vision.py)"
        )
        print(
            'source = "fp32, two AdamW steps and a no-grad forward at batch 8 and 16 under FakeTensorMode, '
            f'accounted by {tool}; FLOPs: bench/presets/derive_flops.py, FlopCounterMode (torch {r["torch"]})"'
        )


if __name__ == "__main__":
    main()
