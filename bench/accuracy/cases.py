"""The accuracy grid: small real models, each case one real CPU step.

Sizes are small enough for a 2-core CPU (a case takes seconds to a minute) but wide
enough that every term of the estimator shows: vocabulary-dominated and
activation-dominated shapes, GQA, long and short sequences.

The model configs are the constants below; the cases are data, one line each in
``cases.toml``, read into ``GRID`` (and its fast subset ``FAST``) when this loads.
"""

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import msgspec


@dataclass(frozen=True)
class Case:
    name: str
    config: dict[str, Any]
    mode: str = "training"  # training | finetune_lora | inference
    precision: str = "fp32"  # fp32 | bf16 | amp_bf16
    attention: str = "sdpa"
    optimizer: str = "adamw"
    checkpointing: str = "none"
    batch: int = 2
    seq: int = 256
    accumulation: int = 1
    new_tokens: int = 0
    lora_rank: int = 0
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: float = 0.0
    head: str = ""  # "" (the usual head) | sequence_classification | token_classification
    num_labels: int = 2
    keep_outputs: bool = False
    loss_chunks: int = 1
    in_backward: bool = False
    framework: str = ""  # "" (one process) | fsdp1 (bench/accuracy/fsdp1.py)
    data: int = 1
    """Ranks of an FSDP1 case (gloo processes on this CPU)."""

    use_orig_params: bool = True
    param_dtype: str = ""  # MixedPrecision.param_dtype under amp_*: "" (the half) | fp32
    backward_prefetch: str = "backward_pre"  # backward_pre | backward_post | none
    adapters: str = "wrapped_separately"  # wrapped_separately | in_layer_units
    no_sync: bool = True
    """FSDP1 with accumulation: micro-batches before the last under ``no_sync()``."""
    tags: tuple[str, ...] = field(default=())


LLAMA = dict(
    model_type="llama",
    vocab_size=8000,
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=4096,
)
LLAMA_WIDE = dict(
    LLAMA,
    vocab_size=2000,
    hidden_size=384,
    intermediate_size=1024,
    num_attention_heads=6,
    num_key_value_heads=6,
)
QWEN2 = dict(
    model_type="qwen2",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=4096,
)
MISTRAL = dict(LLAMA, model_type="mistral", sliding_window=None)
GPT2 = dict(model_type="gpt2", vocab_size=6000, n_embd=256, n_layer=4, n_head=8, n_positions=1024)
NEOX = dict(
    model_type="gpt_neox",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=4,
    num_attention_heads=8,
    max_position_embeddings=2048,
)
OPT = dict(
    model_type="opt",
    vocab_size=6000,
    hidden_size=256,
    ffn_dim=1024,
    num_hidden_layers=4,
    num_attention_heads=8,
    max_position_embeddings=1024,
    word_embed_proj_dim=256,
)
BERT = dict(
    model_type="bert",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=4,
    num_attention_heads=8,
    max_position_embeddings=1024,
)
MIXTRAL = dict(
    model_type="mixtral",
    vocab_size=4000,
    hidden_size=192,
    intermediate_size=512,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    num_local_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=2048,
)
GEMMA = dict(
    model_type="gemma",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=1,
    head_dim=64,
    max_position_embeddings=2048,
)
QWEN3 = dict(
    model_type="qwen3",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=4,
    head_dim=32,
    max_position_embeddings=2048,
)

QWEN2_MOE = dict(
    model_type="qwen2_moe",
    vocab_size=4000,
    hidden_size=192,
    intermediate_size=512,
    moe_intermediate_size=128,
    shared_expert_intermediate_size=256,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    num_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=2048,
)
DEEPSEEK_V3 = dict(
    model_type="deepseek_v3",
    vocab_size=4000,
    hidden_size=192,
    intermediate_size=512,
    moe_intermediate_size=128,
    num_hidden_layers=3,
    first_k_dense_replace=1,
    num_attention_heads=6,
    num_key_value_heads=6,
    n_routed_experts=4,
    n_shared_experts=1,
    num_experts_per_tok=2,
    n_group=1,
    topk_group=1,
    q_lora_rank=96,
    kv_lora_rank=64,
    qk_nope_head_dim=32,
    qk_rope_head_dim=16,
    v_head_dim=32,
    max_position_embeddings=2048,
)
FALCON = dict(
    model_type="falcon",
    vocab_size=6000,
    hidden_size=256,
    num_hidden_layers=4,
    num_attention_heads=8,
    max_position_embeddings=2048,
)
GEMMA2 = dict(GEMMA, model_type="gemma2", num_key_value_heads=2)
ROBERTA = dict(BERT, model_type="roberta", max_position_embeddings=1026, pad_token_id=1)

GPT_BIGCODE = dict(GPT2, model_type="gpt_bigcode")
STARCODER2 = dict(
    model_type="starcoder2",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=1024,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=2,
    max_position_embeddings=2048,
)
GEMMA3 = dict(GEMMA2, model_type="gemma3_text")
QWEN3_MOE = dict(
    model_type="qwen3_moe",
    vocab_size=4000,
    hidden_size=192,
    intermediate_size=512,
    moe_intermediate_size=128,
    num_hidden_layers=3,
    num_attention_heads=6,
    num_key_value_heads=2,
    head_dim=32,
    num_experts=4,
    num_experts_per_tok=2,
    max_position_embeddings=2048,
)
OLMO2 = dict(
    model_type="olmo2",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=2048,
)
PHI3 = dict(OLMO2, model_type="phi3", pad_token_id=0)

# Shapes where the peak falls elsewhere than the loss: activations dominate (large
# hidden, small vocabulary), or the model states and the optimizer step do.
LLAMA_ACT = dict(
    LLAMA,
    vocab_size=512,
    hidden_size=512,
    intermediate_size=1376,
    num_hidden_layers=6,
    num_attention_heads=8,
    num_key_value_heads=2,
)
LLAMA_STATES = dict(
    LLAMA, vocab_size=512, hidden_size=512, intermediate_size=1376, num_hidden_layers=8
)
GPT2_ACT = dict(GPT2, vocab_size=500, n_embd=384, n_head=6)
BERT_ACT = dict(
    BERT, vocab_size=500, hidden_size=384, intermediate_size=1536, num_attention_heads=6
)
NEOX_ACT = dict(NEOX, vocab_size=500)
MIXTRAL_ACT = dict(MIXTRAL, vocab_size=500)

FILE = Path(__file__).with_name("cases.toml")


def _config(name: str) -> dict[str, Any]:
    """The model config a case names: one of the constants above."""
    config = globals().get(name)
    if not (name.isupper() and isinstance(config, dict)):
        raise ValueError(f"{FILE.name}: no model config {name!r} in {Path(__file__).name}")
    return config


def _load() -> list[Case]:
    """The cases of ``cases.toml``, in order, each checked against Case's fields and types."""
    known = {f.name for f in fields(Case)}
    cases = []
    with FILE.open("rb") as f:
        rows = tomllib.load(f)["case"]
    for row in rows:
        if unknown := row.keys() - known:
            raise ValueError(f"{FILE.name}: case {row.get('name')!r}: unknown {sorted(unknown)}")
        cases.append(msgspec.convert({**row, "config": _config(row["config"])}, Case))
    return cases


GRID = _load()
FAST = [c for c in GRID if "fast" in c.tags]
