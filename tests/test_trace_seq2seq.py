"""Encoder-decoder traces: T5, BART and Whisper built from their configs, traced, and
checked against the same steps run for real on this CPU; the one-line refusal of a
family the tracer cannot build, on the API and the command line."""

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from litestar.testing import TestClient

from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.trace.schema import TraceWorkload

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from gpuplan.trace.hf import InvalidConfig, InvalidWorkload, builder  # noqa: E402

T5 = {"model_type": "t5", "vocab_size": 256, "d_model": 64, "d_ff": 128, "d_kv": 16,
      "num_heads": 4, "num_layers": 2}  # fmt: skip
"""T5 with d_model 64 and two layers each side (a minimal config: no
``decoder_start_token_id``, no ``num_decoder_layers``)."""

BART = {"model_type": "bart", "vocab_size": 256, "d_model": 64, "encoder_layers": 2,
        "decoder_layers": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "max_position_embeddings": 128}  # fmt: skip

WHISPER = {"model_type": "whisper", "vocab_size": 256, "d_model": 64, "encoder_layers": 2,
           "decoder_layers": 2, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
           "encoder_attention_heads": 4, "decoder_attention_heads": 4, "num_mel_bins": 80,
           "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
           "decoder_start_token_id": 1}  # fmt: skip
"""Whisper-tiny's shape of input (80 mel bins, 1,500 encoder positions, 448 decoder
positions) on a 64-wide, two-layer model."""

LLAMA = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2}  # fmt: skip

TOLERANCE = 0.005


def workload(**fields: Any) -> TraceWorkload:
    return msgspec.convert({"batch_size": 2, "sequence_length": 32, **fields}, TraceWorkload)


def seeded(config: dict[str, Any], **fields: Any) -> Callable[[], Any]:
    target = builder(config, workload(**fields))

    def build() -> Any:
        torch.manual_seed(0)
        return target()

    return build


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        (T5, "seq2seq"),
        (BART, "seq2seq"),
        ({"model_type": "marian"}, "seq2seq"),
        ({"model_type": "pegasus"}, "seq2seq"),
        ({"model_type": "mt5"}, "seq2seq"),
        (WHISPER, "speech seq2seq"),
        (LLAMA, "causal LM"),
        ({"model_type": "bert"}, "masked LM"),
    ],
)
def test_each_family_is_built_as_its_kind(config: dict[str, Any], kind: str) -> None:
    """BART and Whisper are listed among transformers' causal LMs too (their decoder
    alone): an encoder-decoder config is built whole."""
    assert builder(config, workload()).kind == kind


def test_the_inputs_of_a_text_seq2seq_step() -> None:
    model, inputs = builder(T5, workload(decoder_sequence_length=16))()
    assert type(model).__name__ == "T5ForConditionalGeneration"
    assert inputs["input_ids"].shape == (2, 32)
    # labels and the decoder ids made from them, as DataCollatorForSeq2Seq batches them
    assert inputs["labels"].shape == inputs["decoder_input_ids"].shape == (2, 16)
    _, inputs = builder(T5, workload(mode="inference"))()
    assert inputs["decoder_input_ids"].shape == (2, 32)  # unset: sequence_length
    assert inputs["use_cache"] is True
    assert "labels" not in inputs
    _, inputs = builder(T5, workload(mode="inference", new_tokens=4))()
    assert inputs["decoder_input_ids"].shape == (2, 1)  # the start token generate begins with


def test_the_inputs_of_a_whisper_step() -> None:
    """30 s of log-mel features whatever sequence_length says; the decoder's longest
    transcript unless told."""
    target = builder(WHISPER, workload(sequence_length=7, dtype="bf16"))
    model, inputs = target()
    assert type(model).__name__ == "WhisperForConditionalGeneration"
    assert inputs["input_features"].shape == (2, 80, 3000)
    assert inputs["input_features"].dtype == torch.bfloat16  # the weights' type
    assert inputs["decoder_input_ids"].shape == (2, 448)
    assert any("3,000 frames" in note and "sequence_length does not apply" in note
               for note in target.notes)  # fmt: skip


@pytest.mark.parametrize(
    ("config", "changes", "path"),
    [
        (LLAMA, {"decoder_sequence_length": 8}, "$.workload.decoder_sequence_length"),
        (WHISPER, {"decoder_sequence_length": 449}, "$.workload.decoder_sequence_length"),
        (WHISPER, {"mode": "inference", "new_tokens": 448}, "$.workload.new_tokens"),
    ],
)
def test_a_decoder_length_the_model_cannot_take_is_refused(
    config: dict[str, Any], changes: dict[str, Any], path: str
) -> None:
    with pytest.raises(InvalidWorkload) as caught:
        builder(config, workload(**changes))
    assert caught.value.path == path
    assert builder(WHISPER, workload(mode="inference", new_tokens=447)).decoder_length == 1


@pytest.mark.parametrize(
    ("model_type", "said"),
    [
        ("vit", "model_type 'vit': the tracer builds"),
        ("moonshine", "'moonshine' is a speech model whose inputs the tracer does not build"),
        ("no-such-model", "'no-such-model' is not a model type transformers"),
    ],
)
def test_a_family_the_tracer_cannot_build_is_refused_in_one_line(
    model_type: str, said: str
) -> None:
    """transformers' own refusal lists every config class it has (3 to 12 kB)."""
    with pytest.raises(InvalidConfig) as caught:
        builder({"model_type": model_type}, workload())
    message = str(caught.value)
    assert caught.value.path == "$.model.hf_config.model_type"
    assert said in message
    for kind in ("causal LM", "seq2seq (AutoModelForSeq2SeqLM", "speech seq2seq (Whisper)"):
        assert kind in message
    assert len(message) < 400
    assert "\n" not in message


def test_a_bad_decoder_length_is_a_422_naming_the_field() -> None:
    body = {"model": {"hf_config": T5}, "workload": {"decoder_sequence_length": 0}}
    with TestClient(app=create_app(Settings())) as client:
        response = client.post("/v1/memory/trace", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "$.workload.decoder_sequence_length"


# --- real steps ------------------------------------------------------------------------


def whole_model_parameters(config: dict[str, Any]) -> int:
    """Parameters of the encoder-decoder transformers builds for ``config`` (BART and
    Whisper are also causal LMs to transformers: their decoder alone)."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSpeechSeq2Seq

    values = dict(config)
    hf = AutoConfig.for_model(values.pop("model_type"), **values)
    speech = config["model_type"] == "whisper"
    model = (AutoModelForSpeechSeq2Seq if speech else AutoModelForSeq2SeqLM).from_config(hf)  # type: ignore[no-untyped-call]
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (T5, {"mode": "training"}),
    (T5, {"mode": "training", "decoder_sequence_length": 8, "steps": 1}),
    (T5, {"mode": "inference"}),
    (T5, {"mode": "inference", "new_tokens": 8, "attention": "eager"}),
    (BART, {"mode": "training"}),
    (BART, {"mode": "inference", "new_tokens": 8}),
    (WHISPER, {"mode": "training", "decoder_sequence_length": 32, "attention": "eager"}),
    (WHISPER, {"mode": "inference", "new_tokens": 8, "attention": "eager"}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("config", "fields"), CASES)
def test_traced_peak_equals_measured_peak(config: dict[str, Any], fields: dict[str, Any]) -> None:
    """The traced peak (runtime cpu) against the same step run for real on this CPU, from
    the allocator events of torch's profiler, through the same step driver: the encoder,
    the decoder with its cross-attention, the loss from the labels, and the decode steps
    on the kept encoder output and the cache. Eager attention where SDPA's CPU flash
    kernel would take its unseen per-thread buffers at the peak (the next test)."""
    from bench.accuracy.measure_target import measure_target

    from gpuplan.trace.run import trace

    w = workload(**fields)
    build = seeded(config, **fields)
    optimizer = "adamw" if w.mode == "training" else "none"
    steps: dict[str, Any] = {
        "mode": w.mode,
        "optimizer": optimizer,
        "steps": w.steps,
        "new_tokens": w.new_tokens,
    }
    traced = trace(build, runtime="cpu", **steps)
    measured = measure_target(build, **steps)
    assert traced.parameters == measured.parameters == whole_model_parameters(config)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes
    for phase, peak in measured.phases.items():
        assert getattr(traced.phases, f"{phase}_bytes") == pytest.approx(peak, rel=TOLERANCE)
    if w.new_tokens:
        assert traced.phases.decode_bytes > 0


@pytest.mark.slow
def test_whisper_prefill_misses_only_the_cpu_flash_attention_buffer() -> None:
    """The limit docs/trace.md states: the CPU flash-attention kernel allocates per-thread
    buffers inside its call, which no fake tensor shows. At Whisper's 1,500 encoder
    positions they are seen on this 64-wide model: the traced peak is low by no more
    than what one real call of the encoder's attention allocates beside its outputs."""
    from bench.accuracy.measure_target import measure_target
    from torch.profiler import ProfilerActivity, profile

    from gpuplan.trace.run import trace

    build = seeded(WHISPER, mode="inference", decoder_sequence_length=16)
    traced = trace(build, mode="inference", optimizer="none", runtime="cpu")
    measured = measure_target(build, mode="inference", optimizer="none")
    q = torch.zeros(2, 4, 1500, 16)  # the encoder's self-attention: batch, heads, 1,500, 16
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    events = sorted(
        (e.start_ns(), e.nbytes())
        for e in prof.profiler.kineto_results.events()
        if e.name() == "[memory]"
    )
    alive = peak = 0
    for _, delta in events:
        alive += delta
        peak = max(peak, alive)
    scratch = peak - out.untyped_storage().nbytes() - 2 * 1500 * 4 * 4  # beside out, lse
    assert scratch > 0
    assert 0 <= measured.peak_bytes - traced.peak_bytes <= scratch


# --- the service ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_api_traces_t5_and_refuses_a_vision_model_in_one_line() -> None:
    body = {
        "model": {"hf_config": T5},
        "workload": {"mode": "training", "batch_size": 2, "sequence_length": 32,
                     "decoder_sequence_length": 16},
        "runtime": "cpu",
    }  # fmt: skip
    with TestClient(app=create_app(Settings())) as client:
        traced = client.post("/v1/memory/trace", json=body)
        vision = client.post(
            "/v1/memory/trace", json={"model": {"hf_config": {"model_type": "vit"}}}
        )
        decoder_only = client.post(
            "/v1/memory/trace",
            json={"model": {"hf_config": LLAMA}, "workload": {"decoder_sequence_length": 8}},
        )
    assert traced.status_code == 200, traced.text
    result = traced.json()
    from gpuplan.trace.run import trace

    direct = trace(builder(T5, workload(decoder_sequence_length=16)), runtime="cpu")
    assert result["peak_bytes"] == direct.peak_bytes
    assert result["phases"]["backward_bytes"] > 0
    assert any("decoder_input_ids of 16" in note for note in result["notes"])

    assert vision.status_code == 422
    assert vision.headers["content-type"].startswith("application/problem+json")
    problem = vision.json()
    assert problem["type"] == "urn:gpuplan:problem:invalid-model"
    assert [e["path"] for e in problem["errors"]] == ["$.model.hf_config.model_type"]
    assert "'vit'" in problem["detail"]
    assert "speech seq2seq (Whisper)" in problem["detail"]
    assert len(problem["detail"]) < 500

    assert decoder_only.status_code == 422
    assert decoder_only.json()["type"] == "urn:gpuplan:problem:invalid-workload"
    assert decoder_only.json()["errors"][0]["path"] == "$.workload.decoder_sequence_length"


@pytest.mark.slow
def test_the_cli_traces_a_t5_config_and_refuses_a_vision_one(tmp_path: Path) -> None:
    from tests.test_serve import serving

    t5 = tmp_path / "config.json"
    t5.write_text(json.dumps(T5))
    vit = tmp_path / "vit.json"
    vit.write_text(json.dumps({"model_type": "vit"}))
    with serving() as base:
        traced, refused = (
            subprocess.run(
                [sys.executable, "-m", "gpuplan", "trace", str(config), "--api", base,
                 "--sequence-length", "16", "--decoder-sequence-length", "8",
                 "--format", "json"],
                capture_output=True, timeout=180, check=False,
            )
            for config in (t5, vit)
        )  # fmt: skip
    assert traced.returncode == 0, traced.stderr
    result = json.loads(traced.stdout)
    assert result["parameters"] > 0
    assert any("decoder_input_ids of 8" in note for note in result["notes"])
    assert refused.returncode == 2, refused.stderr
    stderr = refused.stderr.decode()
    assert "$.model.hf_config.model_type" in stderr
    assert "'vit'" in stderr
    assert len(stderr) < 800
