"""The accuracy grid: small real models, each case one real CPU step.

Sizes are small enough for a 2-core CPU (a case takes seconds to a minute) but wide
enough that every term of the estimator shows: vocabulary-dominated and
activation-dominated shapes, GQA, long and short sequences.
"""

from dataclasses import dataclass, field
from typing import Any


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
PHI3 = dict(
    model_type="phi3",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=3,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=2048,
    pad_token_id=0,
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

GPT_BIGCODE = dict(
    model_type="gpt_bigcode", vocab_size=6000, n_embd=256, n_layer=4, n_head=8, n_positions=1024
)
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
GEMMA3 = dict(
    model_type="gemma3_text",
    vocab_size=6000,
    hidden_size=256,
    intermediate_size=704,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=2048,
)
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

FAST = [
    Case("llama fp32 sdpa", LLAMA, tags=("fast",)),
    Case("llama fp32 eager", LLAMA, attention="eager", tags=("fast",)),
    Case("llama bf16 sdpa", LLAMA, precision="bf16", tags=("fast",)),
    Case("gpt2 fp32 eager", GPT2, attention="eager", tags=("fast",)),
    Case("llama inference fp32", LLAMA, mode="inference", batch=4, seq=512, tags=("fast",)),
    Case(
        "llama lora bf16 q,v",
        LLAMA,
        mode="finetune_lora",
        precision="bf16",
        lora_rank=8,
        tags=("fast",),
    ),
]

GRID = [
    *FAST,
    Case("llama bf16 eager", LLAMA, precision="bf16", attention="eager"),
    Case("llama amp_bf16 sdpa", LLAMA, precision="amp_bf16"),
    Case("llama fp32 sdpa ckpt", LLAMA, checkpointing="full"),
    Case("llama fp32 eager long", LLAMA_WIDE, attention="eager", seq=1024, batch=1),
    Case("llama fp32 sgd", LLAMA, optimizer="sgd"),
    Case("llama fp32 adam accum2", LLAMA, optimizer="adam", accumulation=2),
    Case("qwen2 fp32 sdpa", QWEN2),
    Case("qwen2 bf16 eager", QWEN2, precision="bf16", attention="eager"),
    Case("mistral fp32 sdpa", MISTRAL),
    Case("gpt2 fp32 sdpa", GPT2),
    Case("gpt2 bf16 eager", GPT2, precision="bf16", attention="eager"),
    Case("neox fp32 eager", NEOX, attention="eager"),
    Case("neox bf16 sdpa", NEOX, precision="bf16"),
    Case("opt fp32 eager", OPT, attention="eager"),
    Case("bert fp32 eager", BERT, attention="eager"),
    Case("mixtral fp32 sdpa", MIXTRAL),
    Case("gemma fp32 sdpa", GEMMA),
    Case("qwen3 bf16 sdpa", QWEN3, precision="bf16"),
    Case("phi3 fp32 sdpa", PHI3),
    Case(
        "llama inference bf16 eager",
        LLAMA,
        mode="inference",
        precision="bf16",
        attention="eager",
        batch=2,
        seq=1024,
    ),
    Case("gpt2 inference fp32", GPT2, mode="inference", batch=8, seq=512),
    Case("llama activations fp32 sdpa", LLAMA_ACT, batch=4),
    Case(
        "llama activations bf16 eager",
        LLAMA_ACT,
        precision="bf16",
        attention="eager",
        batch=2,
        seq=512,
    ),
    Case(
        "llama activations amp ckpt", LLAMA_ACT, precision="amp_bf16", checkpointing="full", batch=4
    ),
    Case("llama states fp32 adamw", LLAMA_STATES, batch=1, seq=32),
    Case(
        "llama states bf16 adam accum4",
        LLAMA_STATES,
        precision="bf16",
        optimizer="adam",
        batch=1,
        seq=64,
        accumulation=4,
    ),
    Case("gpt2 activations fp32 eager", GPT2_ACT, attention="eager", batch=4),
    Case("bert activations bf16 sdpa", BERT_ACT, precision="bf16", batch=4),
    Case("neox activations fp32 sdpa", dict(NEOX, vocab_size=500), batch=4),
    Case("mixtral activations bf16 sdpa", dict(MIXTRAL, vocab_size=500), precision="bf16", batch=4),
    Case(
        "llama decode bf16",
        LLAMA,
        mode="inference",
        precision="bf16",
        batch=4,
        seq=256,
        new_tokens=16,
    ),
    Case("qwen2 inference bf16 long", QWEN2, mode="inference", precision="bf16", batch=1, seq=2048),
    Case("neox inference bf16", NEOX, mode="inference", precision="bf16", batch=8, seq=512),
    Case("phi3 inference fp32 decode", PHI3, mode="inference", batch=4, seq=256, new_tokens=8),
    Case("falcon inference fp32", FALCON, mode="inference", batch=4, seq=512),
    Case("qwen2_moe fp32 sdpa", QWEN2_MOE),
    Case("deepseek_v3 fp32 sdpa", DEEPSEEK_V3),
    Case("falcon fp32 sdpa", FALCON),
    Case("gemma2 fp32 eager", GEMMA2, attention="eager"),
    Case("roberta bf16 sdpa", ROBERTA, precision="bf16"),
    Case("llama fp32 sgd momentum", LLAMA, optimizer="sgd_momentum"),
    Case("llama states fp32 adafactor", LLAMA_STATES, optimizer="adafactor", batch=1, seq=32),
    Case("llama fp16 sdpa", LLAMA, precision="fp16"),
    Case("llama lora fp32 q,v", LLAMA, mode="finetune_lora", lora_rank=8),
    Case(
        "llama lora bf16 all-linear",
        LLAMA_ACT,
        mode="finetune_lora",
        precision="bf16",
        lora_rank=16,
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        batch=2,
    ),
    Case("gpt_bigcode fp32 sdpa", GPT_BIGCODE),
    Case("gpt_bigcode bf16 eager", GPT_BIGCODE, precision="bf16", attention="eager"),
    Case("starcoder2 fp32 sdpa", STARCODER2),
    Case("gemma3 fp32 sdpa", GEMMA3),
    Case("gemma3 bf16 eager", GEMMA3, precision="bf16", attention="eager"),
    Case("qwen3_moe fp32 sdpa", QWEN3_MOE),
    Case("olmo2 fp32 sdpa", OLMO2),
    Case("olmo2 bf16 eager", OLMO2, precision="bf16", attention="eager"),
    Case("gpt_bigcode inference fp32", GPT_BIGCODE, mode="inference", batch=4, seq=512),
    Case(
        "starcoder2 inference bf16 decode",
        STARCODER2,
        mode="inference",
        precision="bf16",
        batch=4,
        seq=256,
        new_tokens=8,
    ),
    Case("gemma3 inference bf16", GEMMA3, mode="inference", precision="bf16", batch=4, seq=512),
    Case("llama keep outputs fp32", LLAMA, keep_outputs=True),
    Case(
        "llama keep outputs bf16 ckpt",
        LLAMA,
        precision="bf16",
        keep_outputs=True,
        checkpointing="full",
    ),
    Case("llama loss chunks 8 bf16", LLAMA, precision="bf16", loss_chunks=8),
    Case("qwen2 loss chunks 4 fp32", QWEN2, loss_chunks=4),
    Case("llama optimizer in backward fp32", LLAMA_STATES, batch=1, seq=32, in_backward=True),
    Case(
        "llama sequence classification bf16",
        LLAMA,
        precision="bf16",
        head="sequence_classification",
        num_labels=5,
    ),
    Case("llama token classification fp32", LLAMA, head="token_classification", num_labels=9),
    Case("bert sequence classification fp32", BERT, head="sequence_classification", num_labels=3),
    Case(
        "bert token classification bf16",
        BERT_ACT,
        precision="bf16",
        head="token_classification",
        num_labels=9,
        batch=4,
    ),
    Case("roberta sequence classification fp32", ROBERTA, head="sequence_classification"),
    Case(
        "llama lora bf16 all-linear dropout",
        LLAMA,
        mode="finetune_lora",
        precision="bf16",
        lora_rank=8,
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        lora_dropout=0.1,
    ),
    Case(
        "llama lora amp_bf16 o,down dropout",
        LLAMA,
        mode="finetune_lora",
        precision="amp_bf16",
        lora_rank=8,
        lora_targets=("q_proj", "o_proj", "down_proj"),
        lora_dropout=0.05,
    ),
    Case(
        "llama lora fp32 q,k,v,o dropout",
        LLAMA,
        mode="finetune_lora",
        lora_rank=8,
        lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"),
        lora_dropout=0.1,
    ),
    Case(
        "gpt2 lora fp32 dropout",
        GPT2,
        mode="finetune_lora",
        lora_rank=8,
        lora_targets=("c_attn", "c_proj", "c_fc"),
        lora_dropout=0.1,
    ),
    Case(
        "qwen2 lora bf16 eager",
        QWEN2,
        mode="finetune_lora",
        precision="bf16",
        attention="eager",
        lora_rank=8,
    ),
]
