"""Built-in model presets, stored as data (data/models.toml).

Transformer presets are Hugging Face configs, read by the same parser as a user's
``hf_config``. Vision and diffusion presets have no such config; they carry their
parameter count and the activation bytes one sample costs at a reference image size,
measured once by ``bench/presets/derive_vision.py`` and stored with that provenance.
"""

import tomllib
from functools import cache
from importlib import resources
from typing import Any, Literal

import msgspec

from gpuplan.core.memory.hf_config import from_hf_config
from gpuplan.core.memory.parameters import count_parameters
from gpuplan.core.record import Record

Kind = Literal["transformer", "vision", "diffusion"]


class VisionActivations(Record):
    """Per-sample activation bytes (and FLOPs) of a convolutional or vision-transformer model.

    Measured in fp32 at ``reference_image_size``; the estimator scales them by the
    pixel count and the activation dtype.
    """

    reference_image_size: int
    """Side of the square input the figures were measured at (pixels, or latent cells
    for a diffusion UNet)."""

    training_bytes_per_sample: int
    """Growth of a training step's peak per sample: tensors kept for backward and the
    backward's own temporaries at the peak."""

    inference_bytes_per_sample: int
    """Growth of a no-grad forward's peak per sample."""

    gradients_at_peak: float
    """Fraction of the gradients already allocated when the backward peaks."""

    forward_flops_per_sample: int
    """FLOPs of one sample's forward at the reference size (2 per multiply-add, convolutions
    and attention included): what a speed model needs instead of 2 x parameters, which
    a convolution's weight reuse makes meaningless."""

    source: str


class Preset(Record):
    name: str
    source: str
    kind: Kind = "transformer"
    config: dict[str, Any] | None = None
    """Hugging Face config.json fields (transformers)."""

    parameters: int | None = None
    """The parameter count a public source states (required for vision/diffusion)."""

    activations: VisionActivations | None = None


class ModelSummary(Record):
    """One built-in preset, as ``GET /v1/models`` lists it."""

    name: str
    kind: Kind
    parameters: int
    source: str


class ModelList(Record):
    """The built-in model presets, sorted by name, as ``GET /v1/models`` answers."""

    count: int
    models: list[ModelSummary]


@cache
def presets() -> dict[str, Preset]:
    """Every preset by name; validated at first use (a bad entry is a packaging bug)."""
    text = (
        resources.files("gpuplan.core.memory.data")
        .joinpath("models.toml")
        .read_text(encoding="utf-8")
    )
    table = tomllib.loads(text)["models"]
    loaded = {name: msgspec.convert({"name": name, **body}, Preset) for name, body in table.items()}
    for preset in loaded.values():
        if preset.kind == "transformer" and preset.config is None:
            raise ValueError(f"preset {preset.name}: a transformer preset needs a config")
        if preset.kind != "transformer" and (preset.parameters is None or not preset.activations):
            raise ValueError(f"preset {preset.name}: needs parameters and activations")
    return loaded


def parameter_count(preset: Preset) -> int:
    """Parameters of a preset: counted from its config, else the stated figure."""
    if preset.config is not None:
        arch, _ = from_hf_config(preset.config)
        return count_parameters(arch).total
    assert preset.parameters is not None
    return preset.parameters


@cache
def model_list() -> ModelList:
    models = [
        ModelSummary(name=p.name, kind=p.kind, parameters=parameter_count(p), source=p.source)
        for p in sorted(presets().values(), key=lambda p: p.name)
    ]
    return ModelList(count=len(models), models=models)
