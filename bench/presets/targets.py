"""`gpuplan trace` targets for the diffusion presets (the tracer of docs/trace.md).

    GPUPLAN_UNET=sdxl GPUPLAN_BATCH=8 gpuplan trace bench/presets/targets.py:unet \\
        --mode train --runtime cpu --format json

The tracer calls the function inside FakeTensorMode, so the 2.6B-parameter UNet costs
no memory. Configuration comes from the environment because a target takes no
arguments.
"""

import os
from typing import Any

import torch

from bench.presets.derive_vision import SD15_UNET, SDXL_UNET


def unet() -> tuple[Any, dict[str, Any], Any]:
    from diffusers import UNet2DConditionModel

    xl = os.environ.get("GPUPLAN_UNET", "sd15") == "sdxl"
    batch = int(os.environ.get("GPUPLAN_BATCH", "1"))
    config = SDXL_UNET if xl else SD15_UNET
    model = UNet2DConditionModel(**config)
    latent = config["sample_size"]
    inputs: dict[str, Any] = {
        "sample": torch.randn(batch, 4, latent, latent),
        "timestep": torch.randint(0, 1000, (batch,)),
        "encoder_hidden_states": torch.randn(batch, 77, 2048 if xl else 768),
    }
    if xl:
        inputs["added_cond_kwargs"] = {
            "text_embeds": torch.randn(batch, 1280),
            "time_ids": torch.randn(batch, 6),
        }
    noise = torch.randn(batch, 4, latent, latent)
    return model, inputs, lambda out: torch.nn.functional.mse_loss(out.sample, noise)
