"""The trace cost predictor: from a config to seconds, and a refusal that says what fits."""

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.trace import cost
from gpuplan.core.trace.schema import TraceRequest
from tests.helpers import TINY_LLAMA

ROOT = Path(__file__).resolve().parent.parent
DEEP_WIDE = {**TINY_LLAMA, "num_hidden_layers": 4096, "hidden_size": 1 << 20}
"""The issue's config: 4,096 layers, a million wide; it burned the whole limit."""


def request(config: dict[str, Any], **workload: Any) -> TraceRequest:
    return msgspec.convert({"model": {"hf_config": config}, "workload": workload}, TraceRequest)


def test_depth_is_read_where_each_family_keeps_it() -> None:
    assert cost.layers_of({"num_hidden_layers": 32}) == ("num_hidden_layers", 32)
    assert cost.layers_of({"n_layer": 12}) == ("n_layer", 12)
    assert cost.layers_of({"num_layers": 6, "num_decoder_layers": 6}) == ("num_layers", 12)
    assert cost.layers_of({"num_hidden_layers": "many"}) == ("num_hidden_layers", 1)


T5 = {"model_type": "t5", "vocab_size": 32128, "d_model": 512, "num_layers": 6}
BART = {"model_type": "bart", "vocab_size": 50265, "d_model": 1024, "num_hidden_layers": 12,
        "encoder_layers": 12, "decoder_layers": 12}  # fmt: skip
WHISPER = {"model_type": "whisper", "vocab_size": 51866, "d_model": 1280,
           "encoder_layers": 32, "decoder_layers": 32}  # fmt: skip


def test_an_encoder_decoder_counts_its_encoder_and_its_decoder() -> None:
    assert cost.depth_of(BART) == ("encoder_layers", 12, 12)
    assert cost.depth_of(WHISPER) == ("encoder_layers", 32, 32)
    # T5's decoder is as deep as its encoder unless num_decoder_layers says otherwise
    assert cost.depth_of(T5) == ("num_layers", 6, 0)
    assert cost.depth_of(T5, encoder_decoder=True) == ("num_layers", 6, 6)
    assert cost.depth_of({**T5, "is_encoder_decoder": True}) == ("num_layers", 6, 6)
    assert cost.depth_of({**T5, "num_decoder_layers": 2}) == ("num_layers", 6, 2)
    assert cost.table().families["t5"].encoder_decoder
    assert cost.predict(request(T5)).layers == 12
    assert cost.predict(request(BART)).layers == 24


def test_a_decode_step_is_priced_by_the_decoder_alone() -> None:
    """distil-whisper keeps Whisper-large's 32 encoder layers and 2 decoder layers: its
    decode steps run 2 layers, not 34."""
    distil = {**WHISPER, "decoder_layers": 2}
    row, rate = cost.table().families["whisper"], cost.table().seconds_per_inference_operator

    def decoding(config: dict[str, Any]) -> float:
        body = request(config, mode="inference", new_tokens=64, steps=1)
        return cost.predict(body).seconds - cost.predict(request(config, mode="inference",
                                                                 steps=1)).seconds  # fmt: skip

    per_step = row.decode_step_per_layer * 2 + row.fixed
    assert decoding(distil) == pytest.approx(64 * per_step * rate)
    assert decoding(distil) < decoding(WHISPER) / 8


def test_an_encoder_decoder_past_the_limit_is_refused_naming_its_encoder_depth() -> None:
    deep = {**BART, "encoder_layers": 2048, "decoder_layers": 2048}
    errors = dict(cost.refusal(request(deep), 120.0))
    reason = errors["$.model.hf_config.encoder_layers"]
    assert "4,096 layers" in reason
    assert "(encoder and decoder together)" in reason


def test_time_grows_with_layers_steps_and_decode_steps() -> None:
    base = cost.predict(request(TINY_LLAMA)).seconds
    assert cost.predict(request({**TINY_LLAMA, "num_hidden_layers": 8})).seconds > 3 * base
    assert cost.predict(request(TINY_LLAMA, steps=4)).seconds > base
    prefill = cost.predict(request(TINY_LLAMA, mode="inference")).seconds
    decode = cost.predict(request(TINY_LLAMA, mode="inference", new_tokens=64)).seconds
    assert decode > 10 * prefill
    checkpointed = cost.predict(request(TINY_LLAMA, gradient_checkpointing=True)).seconds
    assert checkpointed > base


def test_width_does_not_change_the_prediction() -> None:
    """Fake tensors carry no data: the measured 1M-wide layer traced as fast as a narrow one."""
    narrow = cost.predict(request(TINY_LLAMA)).seconds
    assert cost.predict(request({**TINY_LLAMA, "hidden_size": 1 << 20})).seconds == narrow


def test_an_unknown_type_is_priced_as_the_dearest_known_one() -> None:
    prediction = cost.predict(request({**TINY_LLAMA, "model_type": "not-in-the-table"}))
    dearest = max(cost.predict(request({**TINY_LLAMA, "model_type": f})).seconds
                  for f in cost.table().families)  # fmt: skip
    assert prediction.seconds == dearest
    assert prediction.family in cost.table().families


def test_a_trace_past_the_limit_is_refused_naming_what_fits() -> None:
    errors = dict(cost.refusal(request(DEEP_WIDE), 120.0))
    reason = errors["$.model.hf_config.num_hidden_layers"]
    assert "4,096 layers" in reason
    assert "over the 120 s limit" in reason
    most = int(reason.rsplit("at most ", 1)[1].split(" layers")[0].replace(",", ""))
    assert 1 <= most < 4096
    assert cost.predict(request({**DEEP_WIDE, "num_hidden_layers": most})).seconds <= 120
    assert cost.predict(request({**DEEP_WIDE, "num_hidden_layers": most + 1})).seconds > 120
    assert "one step does not fit either" in errors["$.workload.steps"]


def test_decode_steps_are_named_with_the_number_that_fits() -> None:
    body = request({**TINY_LLAMA, "num_hidden_layers": 200}, mode="inference", new_tokens=1024)
    errors = dict(cost.refusal(body, 30.0))
    assert "decode steps fit" in errors["$.workload.new_tokens"]
    assert cost.refusal(request(TINY_LLAMA), 30.0) == []


def test_the_api_refuses_at_once_with_a_422_problem() -> None:
    body = {"model": {"hf_config": DEEP_WIDE}, "workload": {"mode": "training"}}
    with TestClient(app=create_app(Settings())) as client:
        response = client.post("/v1/memory/trace", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == "urn:gpuplan:problem:trace-too-costly"
    assert problem["errors"][0]["path"] == "$.model.hf_config.num_hidden_layers"
    assert "layers fit" in problem["errors"][0]["reason"]
    assert "GPUPLAN_TRACE_TIMEOUT_SECONDS" in problem["detail"]


def test_the_table_is_the_benchmarks() -> None:
    """cost.toml holds what bench/results/trace_cost.json measured."""
    measured = json.loads((ROOT / "bench" / "results" / "trace_cost.json").read_text())
    table = cost.table()
    for rate in ("seconds_per_training_operator", "seconds_per_inference_operator"):
        assert getattr(table, rate) == pytest.approx(measured[rate], 1e-3)
    for family, row in measured["families"].items():
        assert msgspec.to_builtins(table.families[family]) == {"encoder_decoder": False, **row}
