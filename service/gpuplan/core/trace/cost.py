"""What a trace will cost, predicted from its request before anything runs.

A trace's time is the dispatch of every aten operator its step runs (a fake tensor
computes metadata only, so the width of a layer hardly matters: its depth does). The
table (``data/cost.toml``, measured by ``python -m bench.trace.trace_cost``) holds, per model
type, the operator calls per decoder layer of building the model, of a training step,
of an inference step and of a decode step, and the seconds one call takes (in a
training trace and in an inference trace, whose Python work per call differs). A request's
prediction is their sum over its layers, steps and decode steps; a model type the table
does not list is priced as the dearest type it lists.

:func:`refusal` turns a prediction past the time limit into the fields to change, each
with the largest value that fits, so a request is refused before it queues for minutes
only to be killed.
"""

import tomllib
from collections.abc import Callable, Mapping
from functools import cache
from importlib import resources
from typing import Any

import msgspec

from gpuplan.core.record import Record
from gpuplan.core.trace.schema import TraceRequest

LAYER_KEYS = ("encoder_layers", "num_hidden_layers", "n_layer", "num_layers", "n_layers")
"""Where configs keep their depth (an encoder-decoder's encoder), in the order they are
read (``n_layer``: GPT-2; ``encoder_layers``: BART and Whisper, whose
``num_hidden_layers`` repeats it; ``num_layers``: T5)."""

DECODER_LAYER_KEYS = ("num_decoder_layers", "decoder_layers")
"""An encoder-decoder's decoder layers (T5; BART and Whisper)."""


class FamilyCost(Record, kw_only=True):
    """Operator calls of one model type (per layer unless said; an encoder-decoder's
    layers are its encoder's and its decoder's together)."""

    build_per_layer: float
    training_step_per_layer: float
    inference_step_per_layer: float
    decode_step_per_layer: float
    """Per decoder layer: a decode step runs the decoder alone."""

    encoder_decoder: bool = False
    """Its decoder is as deep as its encoder unless the config says otherwise (T5's
    ``num_decoder_layers`` defaults to ``num_layers``)."""

    training_step_fixed: float
    """Calls of a training step outside the layers (embeddings, head, loss)."""

    fixed: float
    """Calls outside the layers of building and of an inference step."""


class CostTable(Record, kw_only=True):
    source: str
    seconds_per_training_operator: float
    seconds_per_inference_operator: float
    fixed_seconds: float
    fsdp_time_factor: float
    tensor_parallel_time_factor: float
    checkpointing_time_factor: float
    families: dict[str, FamilyCost]


@cache
def table() -> CostTable:
    """The measured table, read once."""
    text = resources.files("gpuplan.core.trace.data").joinpath("cost.toml").read_text("utf-8")
    return msgspec.convert(tomllib.loads(text), CostTable)


class Prediction(Record, kw_only=True):
    """A trace's predicted cost on the machine the table was measured on."""

    seconds: float
    operators: int
    """Operator calls predicted."""

    layers: int
    """All the layers, an encoder-decoder's encoder and decoder together."""

    decoder_layers: int = 0
    """An encoder-decoder's decoder layers (0: no separate decoder)."""

    layers_path: str
    """JSONPath of the config's depth (``$.model.hf_config.num_hidden_layers``)."""

    family: str
    """The model type whose row priced it (the dearest one for an unlisted type)."""

    def seconds_at(self, request: TraceRequest, **changes: int) -> float:
        """The prediction for ``request`` with ``layers`` and workload fields changed."""
        return _predict(request, **changes).seconds


def _int(config: Mapping[str, Any], keys: tuple[str, ...]) -> tuple[str, int] | None:
    for name in keys:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return None


def depth_of(config: Mapping[str, Any], encoder_decoder: bool = False) -> tuple[str, int, int]:
    """``(key, layers, decoder_layers)``: the first depth key of :data:`LAYER_KEYS` and
    its layers (an encoder-decoder's encoder), and the decoder's layers, 0 for a model
    without a separate decoder. An encoder-decoder's decoder without a key of its own
    (``encoder_decoder``, or the config's ``is_encoder_decoder``) is as deep as its
    encoder, as T5's. No depth key: ``("num_hidden_layers", 1, ...)`` (transformers
    then uses its class default, priced as one layer)."""
    key, layers = _int(config, LAYER_KEYS) or ("num_hidden_layers", 1)
    found = _int(config, DECODER_LAYER_KEYS)
    if found is not None:
        decoder = found[1]
    elif encoder_decoder or config.get("is_encoder_decoder") is True:
        decoder = layers
    else:
        decoder = 0
    return key, layers, decoder


def layers_of(config: Mapping[str, Any]) -> tuple[str, int]:
    """``(key, layers)`` of a config: its depth key and all its layers, an
    encoder-decoder's encoder and decoder together (:func:`depth_of`)."""
    key, layers, decoder = depth_of(config)
    return key, layers + decoder


def _row(model_type: object) -> tuple[str, FamilyCost]:
    families = table().families
    if isinstance(model_type, str) and model_type in families:
        return model_type, families[model_type]

    def per_trace(row: FamilyCost) -> float:
        return row.build_per_layer + 2 * row.training_step_per_layer

    name = max(families, key=lambda f: per_trace(families[f]))
    return name, families[name]


def _predict(request: TraceRequest, *, layers: int | None = None, **changes: int) -> Prediction:
    config = request.model.hf_config
    family, row = _row(config.get("model_type"))
    key, encoder, decoder = depth_of(config, row.encoder_decoder)
    depth = encoder + decoder
    decoding = decoder or depth  # the layers a decode step runs
    if layers is not None:  # the encoder and decoder in their proportion
        decoding = max(1, round(decoding * layers / depth)) if decoder else layers
        depth = layers
    workload = msgspec.structs.replace(request.workload, **changes) if changes else request.workload
    steps = workload.steps
    if workload.mode == "inference":
        per_step = row.inference_step_per_layer * depth + row.fixed
        per_step += workload.new_tokens * (row.decode_step_per_layer * decoding + row.fixed)
    else:
        layer_ops = row.training_step_per_layer * depth
        if workload.gradient_checkpointing:  # backward runs each layer's forward again
            layer_ops *= table().checkpointing_time_factor
        per_step = layer_ops + row.training_step_fixed
    operators = row.build_per_layer * depth + row.fixed + steps * per_step
    costs = table()
    factor = 1.0
    if workload.fsdp > 1:
        factor *= costs.fsdp_time_factor
    if workload.tensor_parallel > 1:
        factor *= costs.tensor_parallel_time_factor
    rate = (
        costs.seconds_per_inference_operator
        if workload.mode == "inference"
        else costs.seconds_per_training_operator
    )
    return Prediction(
        seconds=costs.fixed_seconds + operators * rate * factor,
        operators=round(operators),
        layers=depth,
        decoder_layers=decoding if decoder else 0,
        layers_path=f"$.model.hf_config.{key}",
        family=family,
    )


def predict(request: TraceRequest) -> Prediction:
    """The predicted time and operator calls of tracing ``request``."""
    return _predict(request)


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int:
    """The largest ``n`` in ``[low, high]`` with ``fits(n)``, or ``low - 1`` if none."""
    if not fits(low):
        return low - 1
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def refusal(
    request: TraceRequest, limit_seconds: float, overhead_seconds: float = 0.0
) -> list[tuple[str, str]]:
    """Why ``request`` cannot finish within ``limit_seconds`` (a process start costing
    ``overhead_seconds`` included): ``(path, reason)`` pairs naming the fields to change,
    each with the largest value that would fit, others unchanged. Empty when it fits."""
    prediction = predict(request)
    budget = limit_seconds - overhead_seconds
    if prediction.seconds <= budget:
        return []
    workload = request.workload
    said = (
        f"predicted {prediction.seconds:,.0f} s to trace ({prediction.operators:,} operator "
        f"calls: {prediction.layers:,} layers × {workload.steps} step(s)"
        + (f" with {workload.new_tokens} decode steps" if workload.new_tokens else "")
        + f"), over the {limit_seconds:g} s limit (GPUPLAN_TRACE_TIMEOUT_SECONDS)"
    )

    def fits(field: str) -> Callable[[int], bool]:
        return lambda n: _predict(request, **{field: n}).seconds <= budget

    errors = []
    most_layers = _largest(fits("layers"), 1, prediction.layers)
    together = " (encoder and decoder together)" if prediction.decoder_layers else ""
    layers_hint = (
        f"at most {most_layers:,} layers fit{together}"
        if most_layers >= 1
        else "not even one layer fits"
    )
    errors.append((prediction.layers_path, f"{said}; {layers_hint}"))
    if workload.new_tokens:
        most = _largest(fits("new_tokens"), 0, workload.new_tokens)
        hint = f"at most {most} decode steps fit" if most >= 0 else "no decode step fits"
        errors.append(("$.workload.new_tokens", f"{hint} with {prediction.layers:,} layers"))
    if workload.steps > 1:
        most = _largest(fits("steps"), 1, workload.steps)
        hint = f"at most {most} step(s) fit" if most >= 1 else "one step does not fit either"
        errors.append(("$.workload.steps", f"{hint} with {prediction.layers:,} layers"))
    return errors
