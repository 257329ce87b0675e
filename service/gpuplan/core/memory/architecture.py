"""A model's shape, normalized from whatever described it.

Hugging Face configs name the same quantity a dozen ways (``n_embd``, ``d_model``,
``hidden_size``); presets and bare parameter counts give less. Everything below the
parser works on :class:`Architecture` alone, so one formula serves every source.
"""

from typing import Literal

from gpuplan.core.record import Record

Family = Literal["llama", "gpt2", "neox", "opt", "falcon", "bert"]
Head = Literal["causal_lm", "masked_lm", "sequence_classification", "token_classification"]
Activation = Literal["silu", "gelu", "gelu_tanh", "gelu_new", "relu"]
Norm = Literal["rms", "layer"]
Position = Literal["rotary", "learned", "alibi", "none"]


class Moe(Record):
    """Mixture-of-experts layers."""

    num_experts: int
    experts_per_token: int
    expert_intermediate_size: int
    shared_intermediate_size: int = 0
    """Width of the always-on shared expert MLP (0: none)."""

    shared_expert_gate: bool = False
    """Qwen2-MoE scales the shared expert by a learned sigmoid gate."""

    dense_layers: int = 0
    """Leading layers with a dense MLP instead (DeepSeek ``first_k_dense_replace``)."""

    layer_frequency: int = 1
    """Every n-th layer is MoE (Qwen2-MoE ``decoder_sparse_step``)."""


class Mla(Record):
    """Multi-head latent attention (DeepSeek-V2/V3)."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int


class Architecture(Record, kw_only=True):
    """Everything the estimator needs to know about a transformer."""

    model_type: str
    family: Family
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    mlp_gated: bool
    activation: Activation
    norm: Norm
    position: Position
    learned_positions: int = 0
    """Rows of a learned position table (GPT-2 ``n_positions``; OPT adds 2)."""

    rotary_positions: int = 0
    """A rotary model's ``max_position_embeddings`` (0: the config does not say): the rows
    of the cos and sin tables older transformers precompute (``rotary_cache``)."""

    token_types: int = 0
    """BERT token-type embeddings."""

    qkv_bias: bool = False
    output_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    """Per-head RMSNorm of queries and keys (Qwen3, Gemma 3)."""

    qk_norm_full: bool = False
    """The q and k norms span all heads' width (OLMo 2) rather than one head's."""

    norms_per_layer: int = 2
    parallel_residual: bool = False
    """Attention and MLP read the same input (GPT-NeoX, Falcon)."""

    hidden_dropout: float = 0.0
    attention_dropout: float = 0.0
    embedding_dropout: float = 0.0
    word_embed_dim: int = 0
    """OPT's embedding width when it differs from ``hidden_size`` (projected in and out)."""

    rotary_fraction: float = 1.0
    logit_softcap: bool = False
    attention_softcap: bool = False
    sliding_window: int = 0
    global_layers: int = 0
    """With a sliding window: how many layers attend to the whole sequence anyway
    (Gemma 3 interleaves one global layer per six); 0: every layer slides."""
    moe: Moe | None = None
    mla: Mla | None = None
    encoder: bool = False
    """Bidirectional encoder trained as a masked LM (BERT, RoBERTa)."""

    head: Head = "causal_lm"
    """What sits on the last layer: a language-model head over the vocabulary, or a
    classifier of ``num_labels`` per sequence or per token."""

    num_labels: int = 0

    @property
    def classifier(self) -> bool:
        return self.head in ("sequence_classification", "token_classification")

    @property
    def q_dim(self) -> int:
        if self.mla is not None:
            return self.num_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim
