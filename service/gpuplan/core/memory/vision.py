"""Convolutional and vision-transformer models known by measured per-sample activations.

A CNN has no config a formula could read, but its activations are linear in the
batch and, at a fixed architecture, in the pixel count: every feature map is the
input's area divided by a fixed stride product. So one measurement per model (the
growth of a step's peak per sample at a reference size, see ``bench/presets``)
scales to any batch and image size. The activation dtype scales it too: feature
maps are stored in the compute dtype (batch-norm statistics, which stay fp32, are
per channel and negligible).
"""

from gpuplan.core.memory.numerics import FP32, Numerics
from gpuplan.core.memory.peak import Peak
from gpuplan.core.memory.presets import VisionActivations
from gpuplan.core.memory.states_records import ModelStates


def vision_peak(
    profile: VisionActivations,
    states: ModelStates,
    num: Numerics,
    *,
    training: bool,
    batch: int,
    image_size: int,
    accumulating: bool,
) -> Peak:
    """The larger of the backward's and the optimizer step's moments (training), or
    the forward's (inference)."""
    area = (image_size / profile.reference_image_size) ** 2
    dtype = num.matmul / FP32
    if not training:
        return Peak(
            gradients=0.0,
            activations=profile.inference_bytes_per_sample * batch * area * dtype,
            temporary=0.0,
            kv_cache=0.0,
            phase="forward",
        )
    activations = profile.training_bytes_per_sample * batch * area * dtype
    gradients = states.gradients if accumulating else states.gradients * profile.gradients_at_peak
    backward = Peak(
        gradients=gradients, activations=activations, temporary=0.0, kv_cache=0.0, phase="backward"
    )
    step = Peak(
        gradients=states.gradients,
        activations=0.0,
        temporary=states.optimizer_temporary,
        kv_cache=0.0,
        phase="optimizer step",
    )
    return max(backward, step, key=Peak.alive)
