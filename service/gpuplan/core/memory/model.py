"""The model of a request, read: a Hugging Face config, a preset or a bare count.

Each form becomes an :class:`~gpuplan.core.memory.architecture.Architecture` (or, for a
bare count or a vision preset, what little is known), with notes on what was assumed.
"""

from functools import cache

import msgspec

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.hf_config import from_hf_config
from gpuplan.core.memory.parameters import ParameterCount, count_parameters
from gpuplan.core.memory.presets import VisionActivations, presets
from gpuplan.core.memory.schema import ModelSpec
from gpuplan.core.names import closest, did_you_mean
from gpuplan.core.record import Record


class ResolvedModel(Record, kw_only=True):
    """A model spec, read: its architecture, or its bare size and measured activations."""

    arch: Architecture | None
    parameters: int | None
    """A parameter count given as such (bare, or overriding the hinted shape's)."""

    vision: VisionActivations | None = None
    counts: ParameterCount | None = None
    """The architecture's parameter count, when already known (presets are counted once)."""

    notes: list[str]


def resolve_model(spec: ModelSpec) -> ResolvedModel:
    """Read a model spec; raise :class:`InvalidModel` naming the field if it is unusable."""
    given = [k for k in ("hf_config", "name", "parameters") if getattr(spec, k) is not None]
    if len(given) != 1:
        raise InvalidModel(
            [
                (
                    "$.model",
                    f"give exactly one of hf_config, name, parameters (got {', '.join(given) or 'none'})",
                )
            ]
        )
    if spec.hints is not None and spec.parameters is None:
        raise InvalidModel([("$.model.hints", "hints describe a bare parameters count")])
    if spec.hf_config is not None:
        arch, notes = from_hf_config(spec.hf_config)
        resolved = ResolvedModel(arch=arch, parameters=None, notes=notes)
    elif spec.name is not None:
        if spec.name.lower() not in presets():
            raise unknown_preset(spec.name)  # named as written: `Qwen2.5-72B-Instruct`
        resolved = _preset_model(spec.name.lower())
    else:
        resolved = _bare_model(spec)
    return _with_head(resolved, spec)


def _with_head(resolved: ResolvedModel, spec: ModelSpec) -> ResolvedModel:
    """The model with the head the request names (see ``ModelSpec.head``)."""
    arch = resolved.arch
    if spec.head is None or arch is None:
        if spec.head is not None:
            raise InvalidModel([("$.model.head", "needs a transformer architecture")])
        return resolved
    encoder = arch.family == "bert"
    if spec.head == "masked_lm" and not encoder:
        raise InvalidModel([("$.model.head", "masked_lm is BERT's and RoBERTa's head")])
    if spec.head == "causal_lm" and encoder:
        raise InvalidModel([("$.model.head", "BERT and RoBERTa end in masked_lm or a classifier")])
    if spec.head == "token_classification" and arch.family == "opt":
        raise InvalidModel([("$.model.head", "transformers has no token classifier for OPT")])
    if spec.head in ("causal_lm", "masked_lm"):
        return resolved
    arch = msgspec.structs.replace(arch, head=spec.head, num_labels=spec.num_labels)
    return msgspec.structs.replace(
        resolved,
        arch=arch,
        counts=count_parameters(arch),
        notes=[*resolved.notes, f"head: {spec.head} of {spec.num_labels} labels"],
    )


@cache
def _preset_model(name: str) -> ResolvedModel:
    """A preset, read once per process (presets are immutable data)."""
    preset = presets().get(name)
    if preset is None:
        raise unknown_preset(name)
    note = f"preset {preset.name}: {preset.source}"
    if preset.config is None:
        return ResolvedModel(
            arch=None, parameters=preset.parameters, vision=preset.activations, notes=[note]
        )
    arch, notes = from_hf_config(preset.config)
    return ResolvedModel(
        arch=arch, parameters=None, counts=count_parameters(arch), notes=[note, *notes]
    )


def unknown_preset(name: str) -> InvalidModel:
    """The refusal of a preset name: the closest presets (``llama-3-8b`` →
    ``llama-3.1-8b``), or every one when none is close."""
    suggestions = closest(name, ((known, known) for known in presets()))
    hint = did_you_mean(suggestions) or (
        f"; the presets are {', '.join(sorted(presets()))}; for another model give its "
        "Hugging Face config (`hf_config`) or its `parameters`"
    )
    return InvalidModel(
        [("$.model.name", f"no preset named {name!r}{hint}")], suggestions=suggestions
    )


def _bare_model(spec: ModelSpec) -> ResolvedModel:
    assert spec.parameters is not None
    hints = spec.hints
    if hints is None or hints.num_layers is None or hints.hidden_size is None:
        return ResolvedModel(
            arch=None,
            parameters=spec.parameters,
            notes=["parameters only: model states, no activation or KV-cache terms"],
        )
    h = hints.hidden_size
    heads = hints.num_attention_heads or max(h // 128, 1)
    config: dict[str, object] = {
        "model_type": "llama",
        "hidden_size": h,
        "num_hidden_layers": hints.num_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": hints.num_key_value_heads or heads,
        "intermediate_size": hints.intermediate_size or (8 * h // 3 if hints.gated_mlp else 4 * h),
        "vocab_size": hints.vocab_size or 32000,
    }
    if hints.head_dim:
        config["head_dim"] = hints.head_dim
    arch, _ = from_hf_config(config)
    if not hints.gated_mlp:
        arch = msgspec.structs.replace(arch, mlp_gated=False, activation="gelu")
    shape = "a Llama-style decoder" if hints.gated_mlp else "a decoder with a GELU MLP"
    return ResolvedModel(
        arch=arch,
        parameters=spec.parameters,
        notes=[
            f"parameters with hints: read as {shape} of the hinted shape"
            + ("" if hints.vocab_size else ", vocabulary 32000")
            + ("" if hints.intermediate_size else ", feed-forward width from the hidden size")
        ],
    )
