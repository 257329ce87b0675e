"""The estimate's newer request fields, each declared once in core/memory/schema.py:
refused with a 422 naming it, a CLI flag, in the OpenAPI document and (workload
fields) in the plan file's schema."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from litestar.testing import TestClient

from gpuplan.cli import main

ROOT = Path(__file__).resolve().parent.parent
BASE = {"model": {"name": "llama-2-7b"}, "workload": {"mode": "inference", "sequence_length": 8}}

# (JSONPath, a refused value, the CLI flag, a workload field?)
FIELDS = [
    ("$.cuda_version", "12", "--cuda-version", False),
    ("$.module_loading", "sometimes", "--module-loading", False),
    ("$.workload.kv_cache_layout", "paged", "--kv-cache-layout", True),
    ("$.workload.rotary_cache", "global", "--rotary-cache", True),
    ("$.workload.gptq_kernel", "marlin", "--gptq-kernel", True),
    ("$.workload.weight_quantization", "fp3", "--weight-quantization", True),
    ("$.workload.double_quantization", "yes", "--double-quantization", True),
    ("$.workload.quantize_lm_head", 3, "--quantize-lm-head", True),
    ("$.workload.weight_quantization_load", "lazy", "--weight-quantization-load", True),
    ("$.workload.parallelism.framework", "horovod", "--parallelism-framework", True),
    ("$.workload.parallelism.init", "lazy", "--parallelism-init", True),
    (
        "$.workload.parallelism.gradient_reduce_dtype",
        "fp8",
        "--parallelism-gradient-reduce-dtype",
        True,
    ),
    ("$.workload.parallelism.context", 0, "--parallelism-context", True),
    ("$.workload.parallelism.fsdp1.param_dtype", "fp8", "--parallelism-fsdp1-param-dtype", True),
    (
        "$.workload.parallelism.fsdp1.backward_prefetch",
        "pre",
        "--parallelism-fsdp1-backward-prefetch",
        True,
    ),
    ("$.workload.parallelism.fsdp1.adapters", "shared", "--parallelism-fsdp1-adapters", True),
    (
        "$.workload.parallelism.fsdp1.use_orig_params",
        "maybe",
        "--parallelism-fsdp1-use-orig-params",
        True,
    ),
    (
        "$.workload.parallelism.fsdp1.accumulate_without_sync",
        2,
        "--parallelism-fsdp1-accumulate-without-sync",
        True,
    ),
    ("$.workload.compile", "max", "--compile", True),
    ("$.workload.fused_kernels", "yes", "--fused-kernels", True),
    ("$.workload.gradient_checkpointing", "op", "--gradient-checkpointing", True),
    ("$.workload.checkpoint_every_n_layers", 0, "--checkpoint-every-n-layers", True),
    ("$.workload.keep_outputs", "yes", "--keep-outputs", True),
    ("$.workload.loss_chunks", 0, "--loss-chunks", True),
    ("$.workload.optimizer_in_backward", 2, "--optimizer-in-backward", True),
    ("$.workload.activation_offload", "cpu", "--activation-offload", True),
    ("$.model.head", "regression", "--model-head", True),
    ("$.model.num_labels", 0, "--model-num-labels", True),
    ("$.workload.lora.dropout", 1.0, "--lora-dropout", True),
]


@pytest.mark.parametrize(
    ("workload", "path"),
    [
        ({"mode": "inference", "weight_quantization": "int8", "double_quantization": True},
         "$.workload.double_quantization"),
        ({"mode": "inference", "quantize_lm_head": True}, "$.workload.quantize_lm_head"),
        ({"mode": "inference", "weight_quantization_load": "after_full_load"},
         "$.workload.weight_quantization_load"),
        ({"mode": "inference", "weight_quantization": "nf4",
          "weight_quantization_load": "after_full_load"}, "$.workload.weight_quantization_load"),
        ({"mode": "inference", "weight_quantization": "int4",
          "weight_quantization_load": "per_weight"}, "$.workload.weight_quantization_load"),
        ({"mode": "finetune_qlora", "weight_quantization_load": "after_full_load"},
         "$.workload.weight_quantization_load"),
        ({"mode": "inference", "weight_quantization": "int8", "gptq_kernel": "exllama"},
         "$.workload.gptq_kernel"),
        ({"mode": "finetune_qlora", "weight_quantization": "int4"}, "$.workload.weight_quantization"),
        ({"mode": "training", "weight_quantization": "nf4"}, "$.workload.weight_quantization"),
        ({"mode": "training", "checkpoint_every_n_layers": 2}, "$.workload.checkpoint_every_n_layers"),
        ({"mode": "training", "parallelism": {"framework": "fsdp2", "zero_stage": 1}},
         "$.workload.parallelism.zero_stage"),
        ({"mode": "training", "parallelism": {"framework": "ddp", "zero_stage": 2}},
         "$.workload.parallelism.zero_stage"),
        ({"mode": "training", "parallelism": {"init": "materialized"}}, "$.workload.parallelism.init"),
        ({"mode": "training", "parallelism": {"gradient_reduce_dtype": "bf16"}},
         "$.workload.parallelism.gradient_reduce_dtype"),
        ({"mode": "finetune_lora",
          "parallelism": {"framework": "megatron", "gradient_reduce_dtype": "bf16"}},
         "$.workload.parallelism.gradient_reduce_dtype"),
        ({"mode": "training", "precision": "bf16",
          "parallelism": {"framework": "megatron", "gradient_reduce_dtype": "fp16"}},
         "$.workload.parallelism.gradient_reduce_dtype"),
        ({"mode": "training", "precision": "fp32",
          "parallelism": {"framework": "fsdp2", "gradient_reduce_dtype": "bf16"}},
         "$.workload.parallelism.gradient_reduce_dtype"),
        ({"mode": "training", "parallelism": {"context": 3}}, "$.workload.parallelism.context"),
        ({"mode": "training", "parallelism": {"framework": "fsdp2",
                                              "fsdp1": {"backward_prefetch": "none"}}},
         "$.workload.parallelism.fsdp1"),
        ({"mode": "training", "parallelism": {"framework": "fsdp1", "zero_stage": 1}},
         "$.workload.parallelism.zero_stage"),
        ({"mode": "training", "precision": "fp8", "parallelism": {"framework": "fsdp1"}},
         "$.workload.precision"),
        ({"mode": "training", "precision": "amp_bf16",
          "parallelism": {"framework": "fsdp1", "fsdp1": {"param_dtype": "fp16"}}},
         "$.workload.parallelism.fsdp1.param_dtype"),
        ({"mode": "finetune_lora", "parallelism": {
            "framework": "fsdp1",
            "fsdp1": {"adapters": "in_layer_units", "use_orig_params": False}}},
         "$.workload.parallelism.fsdp1.adapters"),
        ({"mode": "training",
          "parallelism": {"framework": "fsdp1", "fsdp1": {"adapters": "in_layer_units"}}},
         "$.workload.parallelism.fsdp1.adapters"),
        ({"mode": "inference", "keep_outputs": True}, "$.workload.keep_outputs"),
        ({"mode": "inference", "activation_offload": True}, "$.workload.activation_offload"),
        ({"mode": "training", "optimizer_in_backward": True, "gradient_accumulation_steps": 2},
         "$.workload.optimizer_in_backward"),
    ],
)  # fmt: skip
def test_rules_across_fields_name_the_field(
    client: TestClient,  # type: ignore[type-arg]
    workload: dict[str, object],
    path: str,
) -> None:
    body = {"model": {"name": "llama-2-7b"}, "workload": {"sequence_length": 8, **workload}}
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert path in [e["path"] for e in response.json()["errors"]]


@pytest.mark.parametrize(
    ("model", "path"),
    [
        ({"name": "llama-2-7b", "head": "masked_lm"}, "$.model.head"),
        ({"name": "bert-base", "head": "causal_lm"}, "$.model.head"),
        ({"parameters": 1000, "head": "sequence_classification"}, "$.model.head"),
    ],
)
def test_heads_the_model_has_not_are_refused(
    client: TestClient,  # type: ignore[type-arg]
    model: dict[str, object],
    path: str,
) -> None:
    body = {"model": model, "workload": {"mode": "training", "sequence_length": 8}}
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    assert [e["path"] for e in response.json()["errors"]] == [path]


def test_a_classifier_head_replaces_the_vocabulary_logits(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    base = {"workload": {"mode": "training", "sequence_length": 512, "batch_size": 8}}
    mlm = client.post("/v1/memory/estimate", json={"model": {"name": "bert-base"}, **base}).json()
    cls = client.post(
        "/v1/memory/estimate",
        json={"model": {"name": "bert-base", "head": "sequence_classification", "num_labels": 3},
              **base},
    ).json()  # fmt: skip
    # bert-base: 768 x 768 pooler and a 768 x 3 classifier replace the MLM transform and
    # the decoder's bias (the decoder itself is tied to the embeddings).
    assert cls["parameters"] - mlm["parameters"] == (768 * 768 + 768 + 768 * 3 + 3) - (
        768 * 768 + 768 + 2 * 768 + 30522
    )
    assert cls["peak_bytes"] < mlm["peak_bytes"]


@pytest.mark.parametrize(
    ("model", "field", "value"),
    [("gpt2", "gradient_checkpointing", "selective_op"), ("bert-base", "compile", True)],
)
def test_llama_only_techniques_say_so_elsewhere(
    client: TestClient,  # type: ignore[type-arg]
    model: str,
    field: str,
    value: object,
) -> None:
    body = {
        "model": {"name": model},
        "workload": {"mode": "training", "sequence_length": 8, field: value},
    }
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422
    assert [e["path"] for e in response.json()["errors"]] == [f"$.workload.{field}"]


def _with(path: str, value: object) -> dict[str, object]:
    body: dict[str, object] = json.loads(json.dumps(BASE))
    parts = path.removeprefix("$.").split(".")
    node: dict[str, object] = body
    for part in parts[:-1]:
        node = node.setdefault(part, {})  # type: ignore[assignment]
    node[parts[-1]] = value
    return body


@pytest.mark.parametrize(("path", "bad", "flag", "workload"), FIELDS)
def test_a_bad_value_is_422_naming_the_field(
    client: TestClient,  # type: ignore[type-arg]
    path: str,
    bad: object,
    flag: str,
    workload: bool,
) -> None:
    response = client.post("/v1/memory/estimate", json=_with(path, bad))
    assert response.status_code == 422, response.text
    assert path in [e["path"] for e in response.json()["errors"]]


@pytest.mark.parametrize(("path", "bad", "flag", "workload"), FIELDS)
def test_the_field_is_a_flag_and_in_the_documents(
    path: str, bad: object, flag: str, workload: bool
) -> None:
    name = path.rsplit(".", 1)[-1]
    assert flag in CliRunner().invoke(main, ["estimate", "--help"]).output
    assert f"{name}:" in (ROOT / "api" / "openapi.yaml").read_text(encoding="utf-8")
    plan_schema = (ROOT / "api" / "plan.schema.json").read_text(encoding="utf-8")
    assert (f'"{name}"' in plan_schema) is workload


@pytest.mark.parametrize(
    ("model", "targets", "paths"),
    [
        ({"name": "llama-2-7b"}, ["query", "value"],
         ["$.workload.lora.target_modules[0]", "$.workload.lora.target_modules[1]"]),
        ({"name": "llama-2-7b"}, ["q_proj", "v_prj"], ["$.workload.lora.target_modules[1]"]),
        ({"name": "gpt2"}, ["q_proj"], ["$.workload.lora.target_modules[0]"]),
        ({"name": "llama-2-7b"}, ["all-linear", "q_proj"], ["$.workload.lora.target_modules"]),
        ({"hf_config": {"model_type": "phi3", "vocab_size": 100, "hidden_size": 64,
                        "intermediate_size": 128, "num_hidden_layers": 2,
                        "num_attention_heads": 4}}, None, ["$.workload.lora.target_modules"]),
    ],
)  # fmt: skip
def test_lora_targets_must_name_the_models_linear_modules(
    client: TestClient,  # type: ignore[type-arg]
    model: dict[str, object],
    targets: list[str] | None,
    paths: list[str],
) -> None:
    """PEFT raises only when no target matches, and ignores a misspelt one beside a
    valid one; here each must name a linear module (and phi3 has no PEFT default)."""
    lora: dict[str, object] = {"rank": 8}
    if targets is not None:
        lora["target_modules"] = targets
    body = {
        "model": model,
        "workload": {"mode": "finetune_lora", "sequence_length": 8, "lora": lora},
    }
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422, response.text
    errors = response.json()["errors"]
    assert [e["path"] for e in errors] == paths
    text = json.dumps(errors)
    assert "linear module" in text or "PEFT" in text


def test_lora_defaults_are_peft_s_and_every_default_is_listed(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    body = {"model": {"name": "gpt2"}, "workload": {"mode": "finetune_lora", "sequence_length": 8}}
    answer = client.post("/v1/memory/estimate", json=body).json()
    # GPT-2's PEFT default is c_attn (768 -> 2304), rank 16, on 12 layers.
    assert answer["trainable_parameters"] == 16 * (768 + 3 * 768) * 12
    notes = " ".join(answer["assumptions"])
    assert "PEFT's default for gpt2, c_attn" in notes
    assert "defaults used: batch_size 1, precision bf16, optimizer adamw" in notes
    assert "lora rank 16" in notes
    assert "lora dropout 0.0" in notes


def test_lora_on_a_model_that_is_not_fine_tuned_is_refused(
    client: TestClient,  # type: ignore[type-arg]
) -> None:
    body = {"model": {"name": "gpt2"}, "workload": {"mode": "training", "sequence_length": 8,
                                                   "lora": {"rank": 4}}}  # fmt: skip
    response = client.post("/v1/memory/estimate", json=body)
    assert response.status_code == 422
    assert [e["path"] for e in response.json()["errors"]] == ["$.workload.lora"]
