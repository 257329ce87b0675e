"""Hugging Face ``config.json`` to :class:`Architecture`, offline.

Each supported ``model_type`` maps its own key names onto ours and supplies the
defaults of its transformers config class for the keys a saved config may omit
(``save_pretrained`` drops values equal to the class default). The shape keys
(layers, hidden size, heads, vocabulary, feed-forward width) are required: a missing
one is an error naming it, never a silent default. An unknown ``model_type`` is refused
as unsupported, pointing to the tracer, which runs any transformers model.
"""

from collections.abc import Mapping
from typing import Any

from gpuplan.core.memory.architecture import Activation, Architecture, Mla, Moe
from gpuplan.core.memory.errors import InvalidModel

ROOT = "$.model.hf_config"

LLAMA_LIKE = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "phi3",
    "mixtral",
    "qwen2_moe",
    "deepseek_v3",
    "gemma3_text",
    "qwen3_moe",
    "olmo2",
)
MAX_LAYERS = 4096
"""Most layers a config may declare. The estimate does work per layer; the deepest
published transformers have a few hundred (Llama 3.1 405B: 126)."""

SUPPORTED = (
    *LLAMA_LIKE,
    "gpt2",
    "gpt_bigcode",
    "starcoder2",
    "gpt_neox",
    "opt",
    "falcon",
    "bert",
    "roberta",
)

_ACTIVATIONS: dict[str, Activation] = {
    "silu": "silu",
    "swish": "silu",
    "gelu": "gelu",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_new": "gelu_new",
    "relu": "relu",
}


class _Reader:
    """Looks keys up, collecting every missing or malformed one before failing."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.config = config
        self.errors: list[tuple[str, str]] = []

    def int(
        self, *keys: str, default: int | None = None, minimum: int = 1, maximum: int = 1 << 24
    ) -> int:
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or value < minimum
                or value > maximum
            ):
                self.errors.append(
                    (
                        f"{ROOT}.{key}",
                        f"expected an integer from {minimum} to {maximum}, got {value!r}",
                    )
                )
                return default or minimum
            return value
        if default is None:
            names = " or ".join(f"`{k}`" for k in keys)
            self.errors.append((f"{ROOT}.{keys[0]}", f"required field missing ({names})"))
            return minimum
        return default

    def float(self, key: str, default: float) -> float:
        value = self.config.get(key, default)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            self.errors.append((f"{ROOT}.{key}", f"expected a number from 0 to 1, got {value!r}"))
            return default
        return float(value)

    def bool(self, key: str, default: bool) -> bool:
        value = self.config.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.errors.append((f"{ROOT}.{key}", f"expected true or false, got {value!r}"))
            return default
        return value

    def activation(self, *keys: str, default: str) -> Activation:
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if value not in _ACTIVATIONS:
                self.errors.append(
                    (
                        f"{ROOT}.{key}",
                        f"unsupported activation {value!r}; expected one of {sorted(_ACTIVATIONS)}",
                    )
                )
                return "silu"
            return _ACTIVATIONS[value]
        return _ACTIVATIONS[default]

    def check(self) -> None:
        if self.errors:
            raise InvalidModel(self.errors)


def from_hf_config(config: Mapping[str, Any]) -> tuple[Architecture, list[str]]:
    """Parse ``config``; return the architecture and the assumptions made reading it."""
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise InvalidModel([(f"{ROOT}.model_type", f"expected a string, got {model_type!r}")])
    assumptions: list[str] = []
    if model_type in (None, "") or model_type not in SUPPORTED:
        # Reading an unknown architecture as a Llama would answer with confidence for
        # the wrong tensors (an encoder-decoder, a state-space model): refuse, and say
        # what answers for any model.
        shown = "missing" if model_type in (None, "") else f"{model_type!r} is not supported"
        raise InvalidModel(
            [
                (
                    f"{ROOT}.model_type",
                    f"{shown} by the analytic estimator (supported: {', '.join(SUPPORTED)}); "
                    "POST /v1/memory/trace (gpuplan trace) traces any transformers model",
                )
            ]
        )
    r = _Reader(config)
    if model_type in ("gpt2", "gpt_bigcode"):
        arch = _gpt2(r, model_type)
    elif model_type == "starcoder2":
        arch = _starcoder2(r)
    elif model_type == "gpt_neox":
        arch = _neox(r)
    elif model_type == "opt":
        arch = _opt(r)
    elif model_type == "falcon":
        arch = _falcon(r)
    elif model_type in ("bert", "roberta"):
        arch = _bert(r, model_type)
    else:
        arch = _llama_like(r, model_type)
    r.check()
    return arch, assumptions


def _heads(
    r: _Reader, hidden: int, heads: int, kv_key: str = "num_key_value_heads"
) -> tuple[int, int]:
    kv = r.int(kv_key, default=heads)
    head_dim = r.int("head_dim", default=max(hidden // heads, 1))
    if kv > heads or heads % kv:
        r.errors.append(
            (f"{ROOT}.{kv_key}", f"{kv} key/value heads do not divide {heads} attention heads")
        )
    return kv, head_dim


def _llama_like(r: _Reader, model_type: str) -> Architecture:
    hidden = r.int("hidden_size")
    layers = r.int("num_hidden_layers", maximum=MAX_LAYERS)
    heads = r.int("num_attention_heads")
    vocab = r.int("vocab_size")
    kv, head_dim = _heads(r, hidden, heads)
    gemma = model_type in ("gemma", "gemma2", "gemma3_text")
    moe: Moe | None = None
    mla: Mla | None = None
    if model_type == "mixtral":
        intermediate = r.int("intermediate_size")
        moe = Moe(
            num_experts=r.int("num_local_experts"),
            experts_per_token=r.int("num_experts_per_tok", default=2),
            expert_intermediate_size=intermediate,
        )
    elif model_type == "qwen2_moe":
        intermediate = r.int("intermediate_size", default=1)
        moe = Moe(
            num_experts=r.int("num_experts"),
            experts_per_token=r.int("num_experts_per_tok", default=4),
            expert_intermediate_size=r.int("moe_intermediate_size"),
            shared_intermediate_size=r.int("shared_expert_intermediate_size", default=0, minimum=0),
            shared_expert_gate=True,
            layer_frequency=r.int("decoder_sparse_step", default=1),
        )
    elif model_type == "qwen3_moe":
        intermediate = r.int("intermediate_size", default=1)
        only_dense = r.config.get("mlp_only_layers") or []
        if only_dense:
            r.errors.append(
                (f"{ROOT}.mlp_only_layers", "dense layers among the experts are not modelled")
            )
        moe = Moe(
            num_experts=r.int("num_experts"),
            experts_per_token=r.int("num_experts_per_tok", default=8),
            expert_intermediate_size=r.int("moe_intermediate_size"),
            layer_frequency=r.int("decoder_sparse_step", default=1),
        )
    elif model_type == "deepseek_v3":
        intermediate = r.int("intermediate_size")
        expert = r.int("moe_intermediate_size")
        moe = Moe(
            num_experts=r.int("n_routed_experts"),
            experts_per_token=r.int("num_experts_per_tok", default=8),
            expert_intermediate_size=expert,
            shared_intermediate_size=expert * r.int("n_shared_experts", default=1, minimum=0),
            dense_layers=r.int("first_k_dense_replace", default=3, minimum=0),
            layer_frequency=r.int("moe_layer_freq", default=1),
        )
        q_lora = r.config.get("q_lora_rank")
        mla = Mla(
            q_lora_rank=r.int("q_lora_rank", default=0, minimum=0) if q_lora is not None else 0,
            kv_lora_rank=r.int("kv_lora_rank", default=512),
            qk_nope_head_dim=r.int("qk_nope_head_dim", default=128),
            qk_rope_head_dim=r.int("qk_rope_head_dim", default=64),
            v_head_dim=r.int("v_head_dim", default=128),
        )
        head_dim = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    else:
        intermediate = r.int("intermediate_size")
    if gemma:
        head_dim = r.int("head_dim", default=256)
    if model_type in ("qwen3", "qwen3_moe"):
        head_dim = r.int("head_dim", default=128)
    default_act = "gelu_pytorch_tanh" if gemma else "silu"
    return Architecture(
        model_type=model_type,
        family="llama",
        num_layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv if mla is None else heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        vocab_size=vocab,
        tie_word_embeddings=r.bool("tie_word_embeddings", gemma),
        mlp_gated=True,
        activation=r.activation("hidden_activation", "hidden_act", default=default_act),
        norm="rms",
        position="rotary",
        qkv_bias=model_type in ("qwen2", "qwen2_moe") or r.bool("attention_bias", False),
        output_bias=r.bool("attention_bias", False) and model_type not in ("qwen2", "qwen2_moe"),
        mlp_bias=r.bool("mlp_bias", False),
        qk_norm=model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2"),
        qk_norm_full=model_type == "olmo2",
        norms_per_layer=4 if model_type in ("gemma2", "gemma3_text") else 2,
        attention_dropout=r.float("attention_dropout", 0.0),
        rotary_fraction=r.float("partial_rotary_factor", 1.0),
        logit_softcap=model_type == "gemma2"
        and r.config.get("final_logit_softcapping", 30.0) is not None,
        attention_softcap=model_type == "gemma2"
        and r.config.get("attn_logit_softcapping", 50.0) is not None,
        sliding_window=r.int("sliding_window", default=0, minimum=0)
        if r.config.get("sliding_window") and model_type not in ("qwen3_moe",)
        else (4096 if model_type == "gemma3_text" and "sliding_window" not in r.config else 0),
        global_layers=_global_layers(r, layers) if model_type == "gemma3_text" else 0,
        moe=moe,
        mla=mla,
    )


def _global_layers(r: _Reader, layers: int) -> int:
    """Gemma 3's layers that attend to the whole sequence: its ``layer_types``, or one in
    ``sliding_window_pattern`` (6, the config class's default)."""
    types = r.config.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if t == "full_attention")
    pattern = r.int("sliding_window_pattern", default=6)
    return layers // pattern


def _gpt2(r: _Reader, model_type: str) -> Architecture:
    """GPT-2, and GPT-BigCode (StarCoder): GPT-2's block with multi-query attention
    (one key/value head, ``multi_query`` true by default) and a tanh GELU."""
    hidden = r.int("n_embd", "hidden_size")
    heads = r.int("n_head", "num_attention_heads")
    bigcode = model_type == "gpt_bigcode"
    kv = 1 if bigcode and r.bool("multi_query", True) else heads
    return Architecture(
        model_type=model_type,
        family="gpt2",
        num_layers=r.int("n_layer", "num_hidden_layers", maximum=MAX_LAYERS),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=max(hidden // heads, 1),
        intermediate_size=r.int("n_inner", default=4 * hidden),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", True),
        mlp_gated=False,
        activation=r.activation(
            "activation_function", default="gelu_pytorch_tanh" if bigcode else "gelu_new"
        ),
        norm="layer",
        position="learned",
        learned_positions=r.int("n_positions", "max_position_embeddings", default=1024),
        qkv_bias=True,
        output_bias=True,
        mlp_bias=True,
        hidden_dropout=r.float("resid_pdrop", 0.1),
        attention_dropout=r.float("attn_pdrop", 0.1),
        embedding_dropout=r.float("embd_pdrop", 0.1),
    )


def _starcoder2(r: _Reader) -> Architecture:
    """StarCoder 2: pre-norm LayerNorms with biases, a tanh-GELU MLP (``c_fc``,
    ``c_proj``), rotary positions and grouped-query attention: OPT's block shape."""
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    kv, head_dim = _heads(r, hidden, heads)
    bias = r.bool("use_bias", True)
    return Architecture(
        model_type="starcoder2",
        family="opt",
        num_layers=r.int("num_hidden_layers", maximum=MAX_LAYERS),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=head_dim,
        intermediate_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", True),
        mlp_gated=False,
        activation=r.activation("hidden_act", default="gelu_pytorch_tanh"),
        norm="layer",
        position="rotary",
        qkv_bias=bias,
        output_bias=bias,
        mlp_bias=bias,
        hidden_dropout=r.float("residual_dropout", 0.0),
        attention_dropout=r.float("attention_dropout", 0.0),
        embedding_dropout=r.float("embedding_dropout", 0.0),
        sliding_window=r.int("sliding_window", default=0, minimum=0)
        if r.config.get("sliding_window")
        else 0,
    )


def _neox(r: _Reader) -> Architecture:
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    return Architecture(
        model_type="gpt_neox",
        family="neox",
        num_layers=r.int("num_hidden_layers", maximum=MAX_LAYERS),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=max(hidden // heads, 1),
        intermediate_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", False),
        mlp_gated=False,
        activation=r.activation("hidden_act", default="gelu"),
        norm="layer",
        position="rotary",
        qkv_bias=r.bool("attention_bias", True),
        output_bias=r.bool("attention_bias", True),
        mlp_bias=True,
        parallel_residual=r.bool("use_parallel_residual", True),
        hidden_dropout=r.float("hidden_dropout", 0.0),
        attention_dropout=r.float("attention_dropout", 0.0),
        rotary_fraction=r.float("rotary_pct", 0.25),
    )


def _opt(r: _Reader) -> Architecture:
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    word = r.int("word_embed_proj_dim", default=hidden)
    return Architecture(
        model_type="opt",
        family="opt",
        num_layers=r.int("num_hidden_layers", maximum=MAX_LAYERS),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=max(hidden // heads, 1),
        intermediate_size=r.int("ffn_dim"),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", True),
        mlp_gated=False,
        activation=r.activation("activation_function", default="relu"),
        norm="layer",
        position="learned",
        learned_positions=r.int("max_position_embeddings", default=2048) + 2,
        qkv_bias=r.bool("enable_bias", True),
        output_bias=r.bool("enable_bias", True),
        mlp_bias=r.bool("enable_bias", True),
        hidden_dropout=r.float("dropout", 0.1),
        attention_dropout=r.float("attention_dropout", 0.0),
        word_embed_dim=word if word != hidden else 0,
    )


def _falcon(r: _Reader) -> Architecture:
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    new_arch = r.bool("new_decoder_architecture", False)
    if new_arch:
        kv = r.int("num_kv_heads", default=heads)
    else:
        kv = 1 if r.bool("multi_query", True) else heads
    bias = r.bool("bias", False)
    return Architecture(
        model_type="falcon",
        family="falcon",
        num_layers=r.int("num_hidden_layers", maximum=MAX_LAYERS),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv,
        head_dim=max(hidden // heads, 1),
        intermediate_size=r.int("ffn_hidden_size", default=4 * hidden),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", True),
        mlp_gated=False,
        activation=r.activation("activation", default="gelu"),
        norm="layer",
        position="alibi" if r.bool("alibi", False) else "rotary",
        qkv_bias=bias,
        output_bias=bias,
        mlp_bias=bias,
        norms_per_layer=2 if new_arch else 1,
        parallel_residual=new_arch or r.bool("parallel_attn", True),
        hidden_dropout=r.float("hidden_dropout", 0.0),
        attention_dropout=r.float("attention_dropout", 0.0),
    )


def _bert(r: _Reader, model_type: str) -> Architecture:
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    return Architecture(
        model_type=model_type,
        family="bert",
        num_layers=r.int("num_hidden_layers", maximum=MAX_LAYERS),
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=max(hidden // heads, 1),
        intermediate_size=r.int("intermediate_size"),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", True),
        mlp_gated=False,
        activation=r.activation("hidden_act", default="gelu"),
        norm="layer",
        position="learned",
        learned_positions=r.int(
            "max_position_embeddings", default=514 if model_type == "roberta" else 512
        ),
        token_types=r.int("type_vocab_size", default=2, minimum=0),  # both config classes' default
        qkv_bias=True,
        output_bias=True,
        mlp_bias=True,
        hidden_dropout=r.float("hidden_dropout_prob", 0.1),
        attention_dropout=r.float("attention_probs_dropout_prob", 0.1),
        embedding_dropout=r.float("hidden_dropout_prob", 0.1),
        encoder=True,
    )
