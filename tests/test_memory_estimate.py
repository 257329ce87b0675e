"""The analytic memory estimator: reference numbers, config parsing, and its physics.

Reference figures are from shared/reference/memory.md §7; parameter counts of every
supported ``model_type`` are checked against transformers itself (a model built
from the same config on the meta device, so no memory and no hub).
"""

import math
from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.errors import InvalidRequest
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.hf_config import from_hf_config
from gpuplan.core.memory.inference import kv_bytes_per_token
from gpuplan.core.memory.parameters import count_parameters
from gpuplan.core.memory.presets import model_list, presets
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse

CATALOG = builtin_catalog()
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def run(model: dict[str, Any], **workload: Any) -> EstimateResponse:
    body: dict[str, Any] = {"model": model, "workload": {"mode": "training", **workload}}
    for key in ("runtime", "method", "gpu", "cuda_version", "module_loading"):
        if key in workload:
            body[key] = body["workload"].pop(key)
    return estimate(msgspec.convert(body, EstimateRequest), CATALOG)


# -- reference numbers -------------------------------------------------------------


def test_llama_2_7b_parameter_count() -> None:
    assert run({"name": "llama-2-7b"}, sequence_length=8).parameters == 6_738_415_616


def test_every_transformer_preset_matches_its_stated_count() -> None:
    for preset in presets().values():
        if preset.config is not None and preset.parameters is not None:
            arch, _ = from_hf_config(preset.config)
            assert count_parameters(arch).total == preset.parameters, preset.name


@pytest.mark.parametrize(("name", "kib_per_token"), [("llama-2-7b", 512), ("llama-3.1-8b", 128)])
def test_fp16_kv_cache_per_token(name: str, kib_per_token: int) -> None:
    arch, _ = from_hf_config(presets()[name].config or {})
    assert kv_bytes_per_token(arch, 2) * arch.num_layers == kib_per_token * KiB


def test_kv_cache_in_an_inference_estimate() -> None:
    # Llama-2-7B, bf16, 4k context: 512 KiB x 4096 tokens = 2 GiB per sequence.
    r = run({"name": "llama-2-7b"}, mode="inference", sequence_length=4096, batch_size=8)
    assert r.breakdown.kv_cache_bytes == 16 * GiB


def test_mixed_precision_adam_is_16_bytes_per_parameter() -> None:
    r = run({"name": "llama-2-7b"}, sequence_length=8, precision="amp_bf16", optimizer="adamw")
    b = r.breakdown
    states = b.weights_bytes + b.gradients_bytes + b.optimizer_state_bytes + b.master_weights_bytes
    assert states == 16 * r.parameters
    # DeepSpeed-style mixed precision (ZeRO): 2 + 2 + 4 master + 8 Adam, still 16.
    z = run({"name": "llama-2-7b"}, sequence_length=8, precision="bf16",
            parallelism={"zero_stage": 1, "data": 1})  # fmt: skip
    zb = z.breakdown
    assert (
        zb.weights_bytes + zb.gradients_bytes + zb.optimizer_state_bytes + zb.master_weights_bytes
        == 16 * z.parameters
    )


def test_gpt3_175b_fp16_weights_are_350_gb() -> None:
    r = run({"name": "gpt-3-175b"}, mode="inference", sequence_length=1, precision="fp16")
    assert r.breakdown.weights_bytes == pytest.approx(350e9, rel=0.01)


# -- parsing: every supported model_type counts as transformers does ----------------

TINY: dict[str, dict[str, Any]] = {
    "llama": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
    "mistral": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
    "qwen2": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
    "qwen3": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 300},
    "gemma": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 300},
    "gemma2": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300},
    "phi3": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "pad_token_id": 0},
    "mixtral": {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen2_moe": {"hidden_size": 64, "intermediate_size": 160, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300, "num_experts": 4, "num_experts_per_tok": 2},
    "deepseek_v3": {"hidden_size": 64, "intermediate_size": 160, "moe_intermediate_size": 32, "num_hidden_layers": 3, "first_k_dense_replace": 1, "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 300, "n_routed_experts": 4, "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "vocab_size": 300},
    "gpt_neox": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 128},
    "opt": {"hidden_size": 64, "ffn_dim": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 128, "word_embed_proj_dim": 32},
    "falcon": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300},
    "bert": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 128},
    "roberta": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 300, "max_position_embeddings": 130},
    "gpt_bigcode": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 128, "vocab_size": 300},
    "starcoder2": {"hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
    "gemma3_text": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300},
    "qwen3_moe": {"hidden_size": 64, "intermediate_size": 160, "moe_intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300, "num_experts": 4, "num_experts_per_tok": 2},
    "olmo2": {"hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300},
}  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_parameter_count_equals_transformers(model_type: str) -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(model_type, **TINY[model_type])
    auto = (
        transformers.AutoModelForMaskedLM
        if model_type in ("bert", "roberta")
        else transformers.AutoModelForCausalLM
    )
    with torch.device("meta"):
        model = auto.from_config(config)
    real = sum(p.numel() for p in model.parameters())
    arch, _ = from_hf_config({"model_type": model_type, **TINY[model_type]})
    assert count_parameters(arch).total == real


def test_gemma3_keeps_the_whole_sequence_in_its_global_layers() -> None:
    """One layer in six attends globally: its cache holds every token, a sliding
    layer's only the window."""
    config = {**TINY["gemma3_text"], "model_type": "gemma3_text", "num_hidden_layers": 6,
              "sliding_window": 512}  # fmt: skip
    r = run({"hf_config": config}, mode="inference", sequence_length=4096, precision="bf16")
    per_token = 2 * 2 * 16 * 2  # k and v, 2 kv heads of 16, bf16
    assert r.breakdown.kv_cache_bytes == per_token * (5 * 512 + 1 * 4096)


@pytest.mark.parametrize("model_type", ["my_decoder", "t5", None])
def test_an_unsupported_model_type_is_refused_pointing_to_the_tracer(
    model_type: str | None,
) -> None:
    """Read as a Llama, a T5 with the standard keys would get a confident wrong answer."""
    config = {**TINY["llama"], "model_type": model_type}
    with pytest.raises(InvalidModel) as caught:
        run({"hf_config": config}, sequence_length=16)
    ((path, reason),) = caught.value.errors
    assert path == "$.model.hf_config.model_type"
    assert "not supported" in reason or "missing" in reason
    assert "POST /v1/memory/trace" in reason
    assert "encoder-decoders (T5, BART" in reason


def test_missing_fields_are_named() -> None:
    with pytest.raises(InvalidModel) as caught:
        run({"hf_config": {"model_type": "llama", "hidden_size": 64}}, sequence_length=8)
    paths = {path for path, _ in caught.value.errors}
    assert {
        "$.model.hf_config.num_hidden_layers",
        "$.model.hf_config.num_attention_heads",
        "$.model.hf_config.vocab_size",
        "$.model.hf_config.intermediate_size",
    } <= paths


CLIENT_VALUES: list[Any] = [[1], {"a": 1}, "x", 1.5, True, -1, 0, 2**70, None]
"""JSON a client may put under any key of ``hf_config``."""

READ_WHEN_PRESENT = ("hidden_act", "hidden_activation", "activation_function", "activation",
                     "tie_word_embeddings", "attention_bias", "sliding_window", "head_dim")  # fmt: skip


@pytest.mark.parametrize("model_type", sorted(TINY))
def test_any_value_under_any_key_is_read_or_refused_naming_it(model_type: str) -> None:
    """The config is the client's: each key a family reads may hold any JSON value. The
    reader answers an architecture, or an InvalidModel naming that key once; never
    another exception (an unhashable ``hidden_act`` list was a 500)."""
    base = {"model_type": model_type, **TINY[model_type]}
    for key in [*TINY[model_type], *READ_WHEN_PRESENT]:
        for value in CLIENT_VALUES:
            errors: list[tuple[str, str]] = []
            try:
                from_hf_config({**base, key: value})
            except InvalidModel as refused:
                errors = refused.errors
            if errors:
                assert f"$.model.hf_config.{key}" in [p for p, _ in errors], (key, value, errors)
                assert len(set(errors)) == len(errors), errors


@pytest.mark.parametrize(
    ("model", "workload", "path"),
    [
        ({"name": "no-such-model"}, {"sequence_length": 8}, "$.model.name"),
        ({"name": "llama-2-7b"}, {}, "$.workload.sequence_length"),
        ({"name": "llama-2-7b"}, {"sequence_length": 8, "parallelism": {"tensor": 3}}, "$.workload.parallelism.tensor"),
        ({"name": "llama-2-7b"}, {"sequence_length": 8, "parallelism": {"expert": 2}}, "$.workload.parallelism.expert"),
        ({"name": "llama-2-7b"}, {"sequence_length": 8, "weight_quantization": "int4"}, "$.workload.weight_quantization"),
        ({"name": "resnet-50"}, {"sequence_length": 8}, "$.workload.sequence_length"),
        ({"name": "llama-2-7b"}, {"sequence_length": 8, "gpu": "no-such-gpu"}, "$.gpu"),
        ({"name": "llama-2-7b", "parameters": 7}, {"sequence_length": 8}, "$.model"),
    ],
)  # fmt: skip
def test_semantic_errors_name_the_field(
    model: dict[str, Any], workload: dict[str, Any], path: str
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        run(model, **workload)
    assert path in {p for p, _ in caught.value.errors}


# -- physics ------------------------------------------------------------------------


def _peak(**workload: Any) -> int:
    return run({"name": "llama-3.1-8b"}, **workload).peak_bytes


def test_more_work_never_needs_less_memory() -> None:
    base = {"sequence_length": 4096, "batch_size": 8}  # activations hold the peak
    assert _peak(**base) < _peak(**{**base, "batch_size": 16})
    assert _peak(**base) < _peak(**{**base, "sequence_length": 8192})
    assert _peak(**base, attention="sdpa") < _peak(**base, attention="eager")


def test_memory_savers_save_memory() -> None:
    base = {"sequence_length": 4096, "batch_size": 4, "precision": "bf16"}
    full = _peak(**base)
    assert _peak(**base, gradient_checkpointing="full") < full
    assert _peak(**base, gradient_checkpointing="selective", attention="eager") < _peak(
        **base, attention="eager"
    )
    dp = {"data": 8}
    z1 = _peak(**base, parallelism={**dp, "zero_stage": 1})
    z2 = _peak(**base, parallelism={**dp, "zero_stage": 2})
    z3 = _peak(**base, parallelism={**dp, "zero_stage": 3})
    assert z3 < z2 <= z1  # ZeRO-2 shards gradients, which the loss-time peak may not hold
    assert z3 < z1
    assert _peak(**base, parallelism={"tensor": 4}) < full
    assert _peak(**base, parallelism={"pipeline": 4}) < full
    assert _peak(**base, mode="finetune_lora") < full
    assert _peak(**base, mode="finetune_qlora") < _peak(**base, mode="finetune_lora")
    assert _peak(**base, optimizer="adamw_8bit") < full
    assert _peak(**base, optimizer="sgd") < full


def test_inference_quantization_and_kv_dtype() -> None:
    base = {"mode": "inference", "sequence_length": 8192, "batch_size": 4, "precision": "bf16"}
    full = run({"name": "llama-2-7b"}, **base)
    int4 = run({"name": "llama-2-7b"}, **base, weight_quantization="int4")
    fp8kv = run({"name": "llama-2-7b"}, **base, kv_cache_dtype="fp8")
    assert int4.breakdown.weights_bytes < full.breakdown.weights_bytes / 3
    assert fp8kv.breakdown.kv_cache_bytes * 2 == full.breakdown.kv_cache_bytes
    longer = run({"name": "llama-2-7b"}, **base, max_new_tokens=1024)
    assert longer.breakdown.kv_cache_bytes == full.breakdown.kv_cache_bytes * (8192 + 1024) // 8192


def test_moe_activations_follow_active_experts_and_weights_all_experts() -> None:
    r = run({"name": "mixtral-8x7b"}, mode="inference", sequence_length=16, precision="bf16")
    assert r.parameters == 46_702_792_704
    assert r.breakdown.weights_bytes == 2 * r.parameters


def test_overhead_and_headroom() -> None:
    cpu = run({"name": "gpt2"}, sequence_length=128, runtime="cpu")
    cuda = run({"name": "gpt2"}, sequence_length=128)
    assert cpu.breakdown.framework_overhead_bytes == 0
    assert cpu.total_bytes == cpu.peak_bytes
    tensors = cuda.peak_bytes - cuda.breakdown.workspace_bytes
    assert cuda.total_bytes == tensors + cuda.breakdown.framework_overhead_bytes
    assert cuda.breakdown.framework_overhead_bytes >= 256 << 20  # a CUDA context at least
    assert cuda.required_bytes == cuda.intervals["device_bytes"].high > cuda.total_bytes
    nccl = run({"name": "gpt2"}, sequence_length=128, parallelism={"data": 8})
    assert nccl.breakdown.framework_overhead_bytes > cuda.breakdown.framework_overhead_bytes


def test_the_measures_by_their_tools_names() -> None:
    """peak (max_memory_allocated) <= reserved (max_memory_reserved) <= device
    (nvidia-smi) and required = the high end of the device's 90% interval; their parts add up. The cuBLAS workspaces
    are allocated, so they are in the peak (an H200 read them there:
    bench/results/reserve_cuda.json)."""
    r = run({"name": "llama-3.1-8b"}, sequence_length=2048, batch_size=2, gpu="h100-sxm5-80gb")
    b = r.breakdown
    assert r.peak_bytes < r.reserved_bytes < r.device_bytes == r.total_bytes
    tensors = (
        b.weights_bytes + b.gradients_bytes + b.optimizer_state_bytes + b.master_weights_bytes
        + b.activations_bytes + b.kv_cache_bytes + b.temporary_bytes
    )  # fmt: skip
    assert r.peak_bytes == tensors + b.workspace_bytes
    assert r.reserved_bytes == r.peak_bytes + b.allocator_cache_bytes
    assert r.device_bytes == r.reserved_bytes + b.context_bytes + b.communication_buffers_bytes
    assert b.framework_overhead_bytes == r.device_bytes - tensors
    assert r.required_bytes == r.intervals["device_bytes"].high
    assert r.headroom_fraction == round(r.required_bytes / r.device_bytes - 1, 4)
    assert r.fit is not None
    assert r.fit.required_bytes == r.required_bytes
    # Two cuBLAS workspaces (forward and autograd threads) of 32 MiB on Hopper.
    assert b.workspace_bytes == 2 * 32 * MiB
    # The logits of 4096 tokens x 128256 in fp32 are the largest requests of the step:
    # the replayed allocator holds at least one more such block than is alive.
    assert b.allocator_cache_bytes > 0
    cpu = run({"name": "llama-3.1-8b"}, sequence_length=2048, batch_size=2, runtime="cpu")
    assert cpu.peak_bytes == cpu.reserved_bytes == cpu.device_bytes


def test_per_layer_rotary_tables_are_kept_with_the_weights() -> None:
    """transformers 4.38.2: every Qwen2Attention's Qwen2RotaryEmbedding keeps cos and sin
    of max_position_embeddings rows x head_dim in the weights' dtype (the Qwen2 speed
    benchmark ran it: 0.5B at 1 token measured 1.17 GiB, 16.5% over the estimate without
    them)."""
    qwen2_05b = {
        "hf_config": {
            "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
            "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "max_position_embeddings": 32768,
            "tie_word_embeddings": True,
        }
    }  # fmt: skip
    base: dict[str, Any] = {
        "mode": "inference", "sequence_length": 1, "max_new_tokens": 2048, "precision": "bf16",
    }  # fmt: skip
    modern = run(qwen2_05b, **base)
    legacy = run(qwen2_05b, **base, rotary_cache="per_layer")
    tables = 24 * 2 * 32768 * 64 * 2  # layers x (cos, sin) x positions x head_dim x bf16
    assert tables == 192 * MiB
    assert legacy.breakdown.weights_bytes - modern.breakdown.weights_bytes == tables
    assert legacy.peak_bytes - modern.peak_bytes == tables
    # fp32 weights build fp32 tables; a pipeline stage keeps its own layers' only.
    fp32 = run(qwen2_05b, **{**base, "precision": "fp32"}, rotary_cache="per_layer")
    fp32_modern = run(qwen2_05b, **{**base, "precision": "fp32"})
    assert fp32.breakdown.weights_bytes - fp32_modern.breakdown.weights_bytes == 2 * tables


def test_per_layer_rotary_tables_need_rotary_positions_and_their_rows() -> None:
    with pytest.raises(InvalidModel) as refused:
        run({"name": "gpt2"}, mode="inference", sequence_length=8, rotary_cache="per_layer")
    assert [e[0] for e in refused.value.errors] == ["$.workload.rotary_cache"]
    no_rows = {
        "hf_config": {
            "model_type": "llama", "vocab_size": 1000, "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        }
    }  # fmt: skip
    with pytest.raises(InvalidModel) as refused:
        run(no_rows, mode="inference", sequence_length=8, rotary_cache="per_layer")
    assert [e[0] for e in refused.value.errors] == ["$.workload.rotary_cache"]
    assert "max_position_embeddings" in refused.value.errors[0][1]


def test_exllama_keeps_a_dequantization_buffer_of_the_largest_layer() -> None:
    """AutoGPTQ 0.7.1's autogptq_post_init: temp_dq of the largest qweight.numel() * 8
    fp16 elements and temp_state of one row (no act-order). optimum's GPTQ benchmark
    (tests/benchmark/README.md, Llama-2-13B, batch 1) measured exllama 139.7 MB above
    AutoGPTQ's cuda-old kernel, which keeps none."""
    base: dict[str, Any] = {
        "mode": "inference", "sequence_length": 512, "max_new_tokens": 512,
        "precision": "fp16", "weight_quantization": "int4",
    }  # fmt: skip
    plain = run({"name": "llama-2-13b"}, **base)
    exllama = run({"name": "llama-2-13b"}, **base, gptq_kernel="exllama")
    temp_dq = 5120 * 13824 * 2  # the MLP's largest weight, dequantized to fp16
    temp_state = 13824 * 2  # one row of the widest dimension
    assert exllama.breakdown.weights_bytes - plain.breakdown.weights_bytes == temp_dq + temp_state
    assert abs(temp_dq + temp_state - 139.7e6) / 139.7e6 < 0.02
    # exllamav2 adds a forward scratch of 2048 tokens x 8 sequences of fp32 outputs.
    v2 = run({"name": "llama-2-13b"}, **base, gptq_kernel="exllamav2")
    scratch = 5120 * 13824 * 2 + 128 + 13824 * 2048 * 8 * 4 + 128
    assert v2.breakdown.weights_bytes - plain.breakdown.weights_bytes == scratch


def test_a_tuple_per_step_cache_is_held_twice_and_its_prefill_keeps_every_logit() -> None:
    """transformers < 4.36: each forward returns a new tuple while the loop holds the
    previous one; the prefill returns fp32 logits of every position."""
    base: dict[str, Any] = {
        "mode": "inference", "sequence_length": 512, "batch_size": 16, "precision": "fp16",
    }  # fmt: skip
    engine = run({"name": "llama-2-13b"}, **base, max_new_tokens=512)
    legacy = run(
        {"name": "llama-2-13b"}, **base, max_new_tokens=512, kv_cache_layout="tuple_per_step"
    )
    kv = 16 * 1024 * 40 * 2 * 5120 * 2  # tokens x layers x (k, v) x hidden x fp16
    assert engine.breakdown.kv_cache_bytes == kv
    assert legacy.peak_phase == "decode (previous cache held)"
    assert legacy.breakdown.kv_cache_bytes == kv
    # The previous step's cache, one token shorter, is a temporary of the last step.
    previous = kv - 16 * 40 * 2 * 5120 * 2
    assert previous <= legacy.breakdown.temporary_bytes < previous + 16 * 32000 * 4 + 1
    prefill = run(
        {"name": "llama-2-13b"}, **base, max_new_tokens=1, kv_cache_layout="tuple_per_step"
    )
    last_only = run({"name": "llama-2-13b"}, **base, max_new_tokens=1)
    logits = 16 * 512 * 32000 * (2 + 4)
    assert prefill.peak_phase == "prefill"
    assert prefill.breakdown.temporary_bytes - last_only.breakdown.temporary_bytes == (
        logits - 16 * 32000 * 6
    )


def test_bitsandbytes_4bit_formats_and_their_temporaries() -> None:
    """Stored bytes per format (bitsandbytes blocks of 64 with an fp32 absmax; double
    quantization 0.127 bits instead of 0.5), the 16-bit head transformers keeps, the
    dequantized weight each matmul makes, and the 16-bit copy each weight loads through."""
    base: dict[str, Any] = {"mode": "inference", "sequence_length": 512, "precision": "bf16"}
    counts = count_parameters(from_hf_config(presets()["llama-2-7b"].config or {})[0])
    layers = sum(lp.attention + lp.mlp + lp.norms for lp in counts.layers)
    rest = counts.total - layers
    nf4 = run({"name": "llama-2-7b"}, **base, weight_quantization="nf4")
    fp4 = run({"name": "llama-2-7b"}, **base, weight_quantization="fp4")
    dq = run({"name": "llama-2-7b"}, **base, weight_quantization="nf4", double_quantization=True)
    head = run({"name": "llama-2-7b"}, **base, weight_quantization="nf4", quantize_lm_head=True)
    assert nf4.breakdown.weights_bytes == fp4.breakdown.weights_bytes
    assert nf4.breakdown.weights_bytes == math.ceil(layers * (0.5 + 4 / 64) + rest * 2)
    assert nf4.breakdown.weights_bytes - dq.breakdown.weights_bytes == pytest.approx(
        layers * 0.373 / 8, rel=0.01
    )
    assert nf4.breakdown.weights_bytes - head.breakdown.weights_bytes == pytest.approx(
        counts.head * (2 - 0.5625), abs=1
    )
    # The prefill dequantizes one weight at a time: the largest (down_proj) in bf16.
    plain = run({"name": "llama-2-7b"}, **base)
    extra = nf4.breakdown.temporary_bytes - plain.breakdown.temporary_bytes
    assert extra == 2 * 4096 * 11008
    # One token: nothing dequantized; loading (every weight 4-bit but the last, largest,
    # still 16-bit) is then the peak.
    tiny = run(
        {"name": "llama-2-7b"}, mode="inference", sequence_length=1, weight_quantization="nf4"
    )
    assert tiny.peak_phase == "loading (quantizing)"
    # QLoRA: the backward dequantizes too.
    qlora = run({"name": "llama-2-7b"}, mode="finetune_qlora", sequence_length=512)
    lora = run({"name": "llama-2-7b"}, mode="finetune_lora", sequence_length=512)
    assert qlora.breakdown.weights_bytes < lora.breakdown.weights_bytes / 3


def test_frameworks_decide_the_bytes_of_the_sharded_states() -> None:
    """FSDP2 under amp: fp32 shards are the master (4 + 4 + 8 over N); DeepSpeed: bf16
    parameters and gradients, fp32 master and moments over N, and its fp32 gradient
    partition at the step; Megatron: bf16 parameters and a full fp32 gradient buffer."""
    base: dict[str, Any] = {"sequence_length": 8, "precision": "amp_bf16"}
    n = 8
    fsdp = run({"name": "llama-2-7b"}, **base, parallelism={"data": n, "framework": "fsdp2"})
    p = fsdp.parameters
    assert fsdp.breakdown.weights_bytes == pytest.approx(4 * p / n, rel=1e-6)
    assert fsdp.breakdown.optimizer_state_bytes == pytest.approx(8 * p / n, rel=1e-6)
    assert fsdp.breakdown.master_weights_bytes == 0
    deep = run({"name": "llama-2-7b"}, **base,
               parallelism={"data": n, "zero_stage": 3, "framework": "deepspeed"})  # fmt: skip
    assert deep.breakdown.weights_bytes == pytest.approx(2 * p / n, rel=1e-6)
    assert deep.breakdown.master_weights_bytes == pytest.approx(4 * p / n, rel=1e-6)
    mega = run({"name": "llama-2-7b"}, **base,
               parallelism={"data": n, "zero_stage": 1, "framework": "megatron"})  # fmt: skip
    assert mega.breakdown.weights_bytes == 2 * p
    assert mega.peak_phase != "optimizer step" or mega.breakdown.gradients_bytes == 4 * p
    # FSDP2's bf16 policy casts at module boundaries: no fp32 autocast copies kept.
    long: dict[str, Any] = {"sequence_length": 4096, "batch_size": 4, "precision": "amp_bf16"}
    sharded = run({"name": "llama-2-7b"}, **long, parallelism={"data": 64, "framework": "fsdp2"})
    autocast = run({"name": "llama-2-7b"}, **long, parallelism={"data": 64, "zero_stage": 3})
    assert sharded.peak_phase == autocast.peak_phase == "backward (loss)"
    assert sharded.breakdown.activations_bytes < autocast.breakdown.activations_bytes


def test_deepspeeds_gradient_bucket_is_allocated_whole() -> None:
    """DeepSpeed allocates its contiguous-gradient bucket at reduce_bucket_size (5e8
    elements of the engine's dtype) however few parameters train: a LoRA of 8M."""
    from gpuplan.core.memory.schema import Workload
    from gpuplan.core.memory.states import model_states

    arch = from_hf_config(presets()["llama-2-7b"].config or {})[0]
    counts = count_parameters(arch)
    for precision, dtype_bytes in (("bf16", 2), ("fp32", 4)):
        body = {"mode": "finetune_lora", "sequence_length": 8, "precision": precision,
                "parallelism": {"data": 8, "zero_stage": 1, "framework": "deepspeed"}}  # fmt: skip
        states = model_states(arch, counts, msgspec.convert(body, Workload), runtime="cuda")
        assert states.trainable < 10_000_000
        assert states.gather == 500_000_000 * dtype_bytes


@pytest.mark.parametrize("framework", ["deepspeed", "fsdp2"])
def test_sharding_splits_the_packed_4bit_weights_not_their_constants(framework: str) -> None:
    """FSDP and ZeRO-3 shard a Params4bit's packed data; its absmax constants live in a
    QuantState every rank keeps whole (bitsandbytes re-attaches it to each shard)."""
    counts = count_parameters(from_hf_config(presets()["llama-2-7b"].config or {})[0])
    layers = sum(lp.attention + lp.mlp + lp.norms for lp in counts.layers)
    rest = counts.total - layers
    n = 4
    base: dict[str, Any] = {"mode": "finetune_qlora", "sequence_length": 8, "precision": "bf16"}
    sharded = run({"name": "llama-2-7b"}, **base, double_quantization=True,
                  parallelism={"data": n, "zero_stage": 3, "framework": framework})  # fmt: skip
    adapters = sharded.trainable_parameters * 4 / n
    constants = 1 / 64 + 4 / (64 * 256)  # an 8-bit absmax per block, an fp32 one per 256
    expected = (layers * 0.5 + rest * 2) / n + layers * constants + adapters
    assert sharded.breakdown.weights_bytes == pytest.approx(expected, rel=1e-6)


def test_lora_dropout_keeps_a_mask_per_adapted_input() -> None:
    """PEFT drops each adapter's fp32 copy of its input: on CUDA a bool mask per element
    is new (the dropped tensor replaces the copy), and none in layer 0's q/k/v, whose
    input needs no gradient (frozen embeddings); o_proj's input follows q's adapter."""
    base: dict[str, Any] = {"mode": "finetune_lora", "sequence_length": 1024, "batch_size": 2,
                            "precision": "bf16", "gradient_checkpointing": "none"}  # fmt: skip
    lora: dict[str, Any] = {"rank": 8, "target_modules": ["q_proj", "v_proj", "o_proj"]}
    plain = run({"name": "llama-2-7b"}, **base, lora=lora)
    dropped = run({"name": "llama-2-7b"}, **base, lora={**lora, "dropout": 0.05})
    assert plain.peak_phase == dropped.peak_phase == "backward (loss)"
    tokens, h, layers = 2 * 1024, 4096, 32
    masks = tokens * h * (3 * (layers - 1) + 1)  # q, v, o in every layer; o alone in layer 0
    added = dropped.breakdown.activations_bytes - plain.breakdown.activations_bytes
    assert added == masks
    assert "lora dropout 0.0" in " ".join(plain.assumptions)


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "fsdp2"])
def test_context_parallel_ranks_share_the_shards(framework: str) -> None:
    """Context-parallel ranks reduce gradients together, so sharded states split over
    data x context (Megatron-core's distributed optimizer takes the data-parallel group
    with context parallel): 4 x 2 ranks shard as 8 data-parallel ones do."""
    base: dict[str, Any] = {"sequence_length": 4096, "precision": "bf16"}
    stage = 3 if framework == "fsdp2" else 1
    layout = {"zero_stage": stage, "framework": framework}
    cp = run({"name": "llama-2-7b"}, **base, parallelism={"data": 4, "context": 2, **layout})
    dp = run({"name": "llama-2-7b"}, **base, parallelism={"data": 8, **layout})
    assert cp.breakdown.optimizer_state_bytes == dp.breakdown.optimizer_state_bytes > 0
    assert cp.breakdown.master_weights_bytes == dp.breakdown.master_weights_bytes


def test_megatrons_gradient_buffer_lives_through_the_step() -> None:
    """Megatron-core allocates one fp32 main-gradient buffer when it wraps the model and
    zeroes it each step: at the backward's peak every gradient byte exists beside the
    activations, with no accumulation steps too (PyTorch's loop frees them instead)."""
    body: dict[str, Any] = {"sequence_length": 2048, "batch_size": 2, "precision": "bf16"}
    layout = {"data": 8, "zero_stage": 1}
    mega = run({"name": "llama-2-7b"}, **body, parallelism={**layout, "framework": "megatron"})
    # Megatron's loss holds the same bytes in its forward and its backward (its fp32
    # softmax beside the 16-bit logits, then beside their gradient's cast): the first named.
    assert mega.peak_phase in ("forward (loss)", "backward (loss)")
    assert mega.breakdown.gradients_bytes == 4 * mega.parameters
    assert mega.breakdown.activations_bytes > 0
    ddp = run({"name": "llama-2-7b"}, **body, parallelism={**layout, "framework": "deepspeed"})
    assert ddp.breakdown.gradients_bytes < mega.breakdown.gradients_bytes


def test_a_half_precision_gradient_buffer_halves_megatrons_gradients() -> None:
    """``grad_reduce_in_fp32 = False`` (NeMo's and Megatron-Bridge's performance recipes):
    the buffer takes the parameters' dtype, and the distributed optimizer builds an fp32
    copy of its shard of the gradients for the step (``shard_model_grad.float()``)."""
    from gpuplan.core.memory.schema import Workload
    from gpuplan.core.memory.states import model_states

    body: dict[str, Any] = {"sequence_length": 2048, "batch_size": 2, "precision": "bf16"}
    layout = {"data": 8, "zero_stage": 1, "framework": "megatron"}
    fp32 = run({"name": "llama-2-7b"}, **body, parallelism=layout)
    bf16 = run({"name": "llama-2-7b"}, **body,
               parallelism={**layout, "gradient_reduce_dtype": "bf16"})  # fmt: skip
    assert fp32.peak_phase == bf16.peak_phase == "forward (loss)"  # as the backward's bytes
    assert "gradient_reduce_dtype fp32" in " ".join(fp32.assumptions)
    assert "gradient_reduce_dtype" not in " ".join(bf16.assumptions)
    assert bf16.breakdown.gradients_bytes == 2 * bf16.parameters
    assert fp32.peak_bytes - bf16.peak_bytes == 2 * bf16.parameters
    arch = from_hf_config(presets()["llama-2-7b"].config or {})[0]
    counts = count_parameters(arch)

    def step_temporary(reduce: str) -> float:
        w = {"mode": "training", "sequence_length": 8, "precision": "bf16",
             "parallelism": {**layout, "gradient_reduce_dtype": reduce}}  # fmt: skip
        return model_states(
            arch, counts, msgspec.convert(w, Workload), runtime="cuda"
        ).optimizer_temporary

    assert step_temporary("bf16") - step_temporary("fp32") == pytest.approx(4 * counts.total / 8)


def test_megatron_without_the_distributed_optimizer_copies_every_gradient_for_the_step() -> None:
    """Float16OptimizerWithFloat16Params: ``main_param.grad = model_param.main_grad.float()``
    for every parameter: a bf16 buffer saves 2 B/param in backward and costs 4 at the step,
    the step's only temporary (Transformer Engine's FusedAdam updates in place,
    megatron/core/optimizer/__init__.py). With an fp32 buffer the step adds nothing, and
    the loss, over the same states, is the peak."""
    body: dict[str, Any] = {"sequence_length": 8, "precision": "bf16"}
    fp32 = run({"name": "llama-2-7b"}, **body, parallelism={"framework": "megatron"})
    bf16 = run({"name": "llama-2-7b"}, **body,
               parallelism={"framework": "megatron", "gradient_reduce_dtype": "bf16"})  # fmt: skip
    assert bf16.peak_phase == "optimizer step"
    assert bf16.breakdown.temporary_bytes == 4 * bf16.parameters
    assert fp32.peak_phase == "forward (loss)"  # the same bytes as the loss's backward
    assert bf16.peak_bytes > fp32.peak_bytes


def test_megatron_under_fp16_keeps_its_gradients_in_fp16() -> None:
    """Megatron-LM forces fp32 gradient accumulation for bf16 only (arguments.py)."""
    body: dict[str, Any] = {"sequence_length": 2048, "precision": "fp16"}
    layout = {"data": 8, "zero_stage": 1, "framework": "megatron"}
    default = run({"name": "llama-2-7b"}, **body, parallelism=layout)
    named = run(
        {"name": "llama-2-7b"}, **body, parallelism={**layout, "gradient_reduce_dtype": "fp16"}
    )
    assert (
        default.breakdown.gradients_bytes
        == named.breakdown.gradients_bytes
        == 2 * default.parameters
    )
    wide = run(
        {"name": "llama-2-7b"}, **body, parallelism={**layout, "gradient_reduce_dtype": "fp32"}
    )
    assert wide.breakdown.gradients_bytes == 4 * default.parameters


def test_fsdp2_reducing_in_bf16_drops_the_fp32_cast_of_a_layers_gradients() -> None:
    from gpuplan.core.memory.schema import Workload
    from gpuplan.core.memory.states import model_states

    arch = from_hf_config(presets()["llama-2-7b"].config or {})[0]
    counts = count_parameters(arch)

    def reduce_buffer(dtype: str | None) -> float:
        p: dict[str, Any] = {"data": 8, "framework": "fsdp2"}
        if dtype:
            p["gradient_reduce_dtype"] = dtype
        w = {"mode": "training", "sequence_length": 8, "precision": "amp_bf16", "parallelism": p}
        return model_states(arch, counts, msgspec.convert(w, Workload), runtime="cuda").reduce

    assert reduce_buffer(None) == reduce_buffer("fp32") == counts.largest_layer * (2 + 4)
    assert reduce_buffer("bf16") == counts.largest_layer * 2


def test_a_materialized_model_peaks_before_sharding() -> None:
    body: dict[str, Any] = {"sequence_length": 8, "precision": "amp_bf16"}
    meta = run({"name": "llama-2-7b"}, **body, parallelism={"data": 64, "framework": "fsdp2"})
    built = run({"name": "llama-2-7b"}, **body,
                parallelism={"data": 64, "framework": "fsdp2", "init": "materialized"})  # fmt: skip
    assert meta.peak_phase != built.peak_phase == "materialization (before sharding)"
    assert built.peak_bytes == pytest.approx(4 * built.parameters, rel=0.001)
    assert built.breakdown.optimizer_state_bytes == 0


def test_checkpointing_variants_and_compile_order_the_activations() -> None:
    """none > selective_op (keeps attention and every other matmul's output) > full;
    one layer in two checkpointed sits between; compile keeps less than eager;
    context parallelism divides a layer's activations."""
    base: dict[str, Any] = {
        "mode": "finetune_lora", "sequence_length": 4096, "batch_size": 4, "precision": "bf16",
        "lora": {"target_modules": ["all-linear"]},
    }  # fmt: skip

    def acts(**extra: Any) -> int:
        r = run({"name": "llama-3.1-8b"}, **base, **extra)
        assert r.peak_phase.startswith("backward")
        return r.breakdown.activations_bytes

    none, full = acts(), acts(gradient_checkpointing="full")
    op = acts(gradient_checkpointing="selective_op")
    half = acts(gradient_checkpointing="full", checkpoint_every_n_layers=2)
    assert none > op > full
    assert none > half > full
    assert acts(compile=True) < none
    cp = run(
        {"name": "llama-3.1-8b"}, **base, parallelism={"context": 2}
    ).breakdown.activations_bytes
    assert cp < 0.6 * none


def test_the_context_follows_module_loading_and_the_cuda_version() -> None:
    base: dict[str, Any] = {"mode": "inference", "sequence_length": 512}
    lazy = run({"name": "llama-2-7b"}, **base)
    eager = run({"name": "llama-2-7b"}, **base, module_loading="eager")
    old = run({"name": "llama-2-7b"}, **base, cuda_version="11.3")
    # The mean of the job figures of data/runtime.toml (T4 loading, H100 serving).
    assert lazy.breakdown.context_bytes == (585_000_000 + 1_921_997_864) // 2
    assert eager.breakdown.context_bytes == old.breakdown.context_bytes == 934_000_000
    assert any("predates lazy module loading" in a for a in old.assumptions)
    assert eager.reserved_bytes == lazy.reserved_bytes
    with pytest.raises(msgspec.ValidationError, match="cuda_version"):
        msgspec.convert(
            {"model": {"name": "gpt2"}, "workload": {"mode": "training"}, "cuda_version": "12"},
            EstimateRequest,
        )


def test_fit_verdict_against_usable_memory() -> None:
    base = {"mode": "inference", "sequence_length": 4096, "precision": "bf16"}
    l4 = run({"name": "llama-2-7b"}, **base, gpu="NVIDIA L4")
    t4 = run({"name": "llama-2-7b"}, **base, gpu="t4-16gb")
    assert l4.fit is not None
    assert l4.fit.fits
    assert l4.fit.gpu == "l4-24gb"
    assert t4.fit is not None
    assert not t4.fit.fits


def test_rule_of_thumb_is_the_seed_formula_with_a_warning() -> None:
    r = run({"parameters": 1_000_000_000}, method="rule_of_thumb")
    assert r.peak_bytes == pytest.approx(2e9 * 1.3)
    assert r.warnings
    assert "underestimates" in r.warnings[0]
    analytic = run({"name": "llama-2-7b"}, sequence_length=2048, precision="amp_bf16")
    thumb = run({"name": "llama-2-7b"}, sequence_length=2048, method="rule_of_thumb")
    assert thumb.peak_bytes < analytic.peak_bytes / 2


def test_bare_parameters_warn_that_activations_are_missing() -> None:
    r = run({"parameters": 7_000_000_000}, mode="inference", precision="bf16")
    assert r.breakdown.weights_bytes == 14_000_000_000
    assert r.warnings


def test_hints_enable_activation_terms() -> None:
    hinted = run(
        {"parameters": 7_000_000_000, "hints": {"num_layers": 32, "hidden_size": 4096}},
        sequence_length=2048,
    )
    assert hinted.breakdown.activations_bytes > 0 or hinted.peak_phase == "optimizer step"
    assert hinted.parameters == 7_000_000_000


def test_vision_presets_scale_with_batch_and_area() -> None:
    one = run({"name": "resnet-50"}, batch_size=64, precision="fp32")
    two = run({"name": "resnet-50"}, batch_size=128, precision="fp32")
    big = run({"name": "resnet-50"}, batch_size=64, image_size=448, precision="fp32")
    assert one.parameters == 25_557_032
    assert two.breakdown.activations_bytes == pytest.approx(
        2 * one.breakdown.activations_bytes, rel=1e-6
    )
    assert big.breakdown.activations_bytes == pytest.approx(
        4 * one.breakdown.activations_bytes, rel=1e-6
    )
    half = run({"name": "resnet-50"}, batch_size=64, precision="amp_bf16")
    assert half.breakdown.activations_bytes == pytest.approx(
        one.breakdown.activations_bytes / 2, rel=1e-6
    )


def test_models_list_has_every_required_preset() -> None:
    names = {m.name for m in model_list().models}
    assert {
        "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b",
        "llama-3.1-405b", "mistral-7b", "mixtral-8x7b", "qwen2.5-7b", "qwen2.5-72b",
        "gpt-3-175b", "gpt2", "bert-base", "bert-large", "resnet-50", "resnet-152",
        "vit-b-16", "yolov5s", "yolov5m", "yolov5l", "stable-diffusion-1.5-unet", "sdxl-unet",
    } <= names  # fmt: skip


def test_estimates_are_deterministic() -> None:
    a = msgspec.json.encode(
        run({"name": "mixtral-8x7b"}, sequence_length=512, gpu="h100-sxm5-80gb")
    )
    b = msgspec.json.encode(
        run({"name": "mixtral-8x7b"}, sequence_length=512, gpu="h100-sxm5-80gb")
    )
    assert a == b


def test_diffusion_presets_match_what_practitioners_see() -> None:
    """SD 1.5 generation (classifier-free guidance: 2 UNet samples per image) runs on a
    24 GB card; a full SDXL fine-tune in bf16 with AdamW does not, and fits an 80 GB one."""
    sd = run({"name": "stable-diffusion-1.5-unet"}, mode="inference", batch_size=2,
             image_size=512, precision="fp16", gpu="rtx-4090-24gb")  # fmt: skip
    assert sd.fit is not None
    assert sd.fit.fits
    xl = run({"name": "sdxl-unet"}, batch_size=1, precision="bf16", gpu="rtx-4090-24gb")
    assert xl.fit is not None
    assert not xl.fit.fits
    big = run({"name": "sdxl-unet"}, batch_size=1, precision="bf16", gpu="a100-sxm4-80gb")
    assert big.fit is not None
    assert big.fit.fits
