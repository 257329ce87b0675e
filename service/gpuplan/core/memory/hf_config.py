"""Hugging Face ``config.json`` to :class:`Architecture`, offline.

Each supported ``model_type`` speaks a :class:`Dialect`: its own key names for our
fields, and the defaults of its transformers config class for the keys a saved config
may omit (``save_pretrained`` drops values equal to the class default). One reader
serves every dialect; code of its own is kept for what a family computes differently
(which heads share keys and values, mixture-of-experts, latent attention). The shape
keys (layers, hidden size, heads, vocabulary, feed-forward width) are required: a
missing one is an error naming it, never a silent default. An unknown ``model_type`` is
refused as unsupported, pointing to the tracer, which runs any transformers model.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.core.memory.architecture import Activation, Architecture, Family, Mla, Moe, Norm
from gpuplan.core.memory.errors import InvalidModel

ROOT = "$.model.hf_config"

MAX_LAYERS = 4096
"""Most layers a config may declare. The estimate does work per layer; the deepest
published transformers have a few hundred (Llama 3.1 405B: 126)."""

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
            if not isinstance(value, str) or value not in _ACTIVATIONS:
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
        """Fail with every error found, each once (some keys are read twice: a family's
        ``head_dim`` with the attention and again after the MLP)."""
        if self.errors:
            raise InvalidModel(list(dict.fromkeys(self.errors)))


@dataclass(frozen=True)
class Flag:
    """A boolean a config may set: its key and the config class's default."""

    key: str
    default: bool = False
    used: bool = True
    """False: the value is checked, then ignored (Qwen2 has q/k/v biases and no output
    bias whatever ``attention_bias`` says, yet a malformed one is still refused)."""


@dataclass(frozen=True)
class Fraction:
    """A number from 0 to 1 a config may set (a dropout, the rotary share of a head)."""

    key: str
    default: float


@dataclass(frozen=True)
class Positions:
    """A learned position table: the keys giving its rows, the config class's default,
    and the rows the model adds (OPT offsets positions by 2)."""

    keys: tuple[str, ...]
    default: int
    extra: int = 0


KvHeads = Callable[[_Reader, int, int], tuple[int, int]]
"""Reads the key/value heads and the head width, given the hidden size and heads."""

Experts = Callable[[_Reader], tuple[int, Moe]]
"""Reads the dense feed-forward width and the mixture of experts."""


def _multi_head(r: _Reader, hidden: int, heads: int) -> tuple[int, int]:
    """Every head has its own keys and values."""
    return heads, max(hidden // heads, 1)


def _multi_query(r: _Reader, hidden: int, heads: int) -> tuple[int, int]:
    """One key/value head shared by all, unless ``multi_query`` is false."""
    return (1 if r.bool("multi_query", True) else heads), max(hidden // heads, 1)


def _grouped(r: _Reader, hidden: int, heads: int) -> tuple[int, int]:
    """Grouped-query attention: ``num_key_value_heads`` groups, which must divide the
    heads, and a ``head_dim`` that need not be ``hidden_size / heads``."""
    kv = r.int("num_key_value_heads", default=heads)
    head_dim = r.int("head_dim", default=max(hidden // heads, 1))
    if kv > heads or heads % kv:
        r.errors.append(
            (
                f"{ROOT}.num_key_value_heads",
                f"{kv} key/value heads do not divide {heads} attention heads",
            )
        )
    return kv, head_dim


def _falcon_grouped(r: _Reader, hidden: int, heads: int) -> tuple[int, int]:
    """Falcon's new decoder architecture: ``num_kv_heads`` groups."""
    return r.int("num_kv_heads", default=heads), max(hidden // heads, 1)


@dataclass(frozen=True)
class Dialect:
    """How one ``model_type``'s config names our fields, and its class's defaults.

    The reader reads the keys in a fixed order, and a malformed config's errors come
    in that order, so where a field is read (before the depth, with the attention; or
    after the shape, with everything else) is part of the behaviour. A bool, float or
    int in place of a key is the fixed value of a family that has no such key.
    """

    family: Family
    hidden: tuple[str, ...] = ("hidden_size",)
    heads: tuple[str, ...] = ("num_attention_heads",)
    layers: tuple[str, ...] = ("num_hidden_layers",)
    kv_heads: KvHeads = _multi_head
    variant: "tuple[str, Dialect] | None" = None
    """A boolean key that, true, switches to another dialect, read after the heads
    (Falcon's ``new_decoder_architecture``, the block of Falcon 40B and 180B)."""

    bias: Flag | None = None
    """One key for all three biases, read with the attention (StarCoder 2, Falcon)."""

    word_embed: str | None = None
    """OPT's ``word_embed_proj_dim``: embeddings narrower than the hidden size."""

    intermediate: str = "intermediate_size"
    ffn_multiple: int = 0
    """The feed-forward width's default in hidden sizes; 0: the key is required."""

    experts: Experts | None = None
    """Reads the MLP's mixture of experts, and the dense width (Llama family)."""

    mla: bool = False
    """Multi-head latent attention (DeepSeek-V3): its ranks set the head width."""

    head_dim: int = 0
    """The config class's ``head_dim`` when it is not ``hidden_size / heads`` (Gemma,
    Qwen3); read again after the MLP, over what the attention read."""

    tie: bool = True
    """``tie_word_embeddings``'s default."""

    gated: bool = False
    activation: tuple[str, ...] = ("hidden_act",)
    default_activation: str = "gelu"
    norm: Norm = "layer"
    alibi: bool | Flag = False
    """ALiBi instead of rotary positions (Falcon's ``alibi``)."""

    positions: Positions | None = None
    """A learned position table instead of rotary positions."""

    token_types: bool = False
    """BERT's ``type_vocab_size`` (2 by default in both config classes)."""

    qkv_bias: bool | Flag = True
    output_bias: bool | Flag = True
    mlp_bias: bool | Flag = True
    qk_norm: bool = False
    qk_norm_full: bool = False
    norms_per_layer: int = 2
    parallel: bool | Flag = False
    hidden_dropout: float | Fraction = 0.0
    attention_dropout: float | Fraction = Fraction("attention_dropout", 0.0)
    embedding_dropout: float | Fraction = 0.0
    rotary: float | Fraction = 1.0
    softcaps: bool = False
    """Gemma 2 caps attention scores and logits (unless its config sets them null)."""

    sliding_window: int | None = None
    """Whether ``sliding_window`` is read, and the window when the key is absent
    (Gemma 3: 4096); None: not read (Qwen3-MoE, whose ``use_sliding_window`` is off)."""

    global_layers: bool = False
    """Gemma 3 interleaves layers that attend to the whole sequence."""

    encoder: bool = False


def _mixtral(r: _Reader) -> tuple[int, Moe]:
    intermediate = r.int("intermediate_size")
    moe = Moe(
        num_experts=r.int("num_local_experts"),
        experts_per_token=r.int("num_experts_per_tok", default=2),
        expert_intermediate_size=intermediate,
    )
    return intermediate, moe


def _qwen2_moe(r: _Reader) -> tuple[int, Moe]:
    intermediate = r.int("intermediate_size", default=1)
    moe = Moe(
        num_experts=r.int("num_experts"),
        experts_per_token=r.int("num_experts_per_tok", default=4),
        expert_intermediate_size=r.int("moe_intermediate_size"),
        shared_intermediate_size=r.int("shared_expert_intermediate_size", default=0, minimum=0),
        shared_expert_gate=True,
        layer_frequency=r.int("decoder_sparse_step", default=1),
    )
    return intermediate, moe


def _qwen3_moe(r: _Reader) -> tuple[int, Moe]:
    intermediate = r.int("intermediate_size", default=1)
    if r.config.get("mlp_only_layers") or []:
        r.errors.append(
            (f"{ROOT}.mlp_only_layers", "dense layers among the experts are not modelled")
        )
    moe = Moe(
        num_experts=r.int("num_experts"),
        experts_per_token=r.int("num_experts_per_tok", default=8),
        expert_intermediate_size=r.int("moe_intermediate_size"),
        layer_frequency=r.int("decoder_sparse_step", default=1),
    )
    return intermediate, moe


def _deepseek_v3(r: _Reader) -> tuple[int, Moe]:
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
    return intermediate, moe


def _mla(r: _Reader) -> Mla:
    return Mla(
        q_lora_rank=r.int("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=r.int("kv_lora_rank", default=512),
        qk_nope_head_dim=r.int("qk_nope_head_dim", default=128),
        qk_rope_head_dim=r.int("qk_rope_head_dim", default=64),
        v_head_dim=r.int("v_head_dim", default=128),
    )


_LLAMA = Dialect(
    family="llama",
    kv_heads=_grouped,
    tie=False,
    gated=True,
    activation=("hidden_activation", "hidden_act"),
    default_activation="silu",
    norm="rms",
    qkv_bias=Flag("attention_bias"),
    output_bias=Flag("attention_bias"),
    mlp_bias=Flag("mlp_bias"),
    rotary=Fraction("partial_rotary_factor", 1.0),
    sliding_window=0,
)
_GEMMA = replace(_LLAMA, head_dim=256, tie=True, default_activation="gelu_pytorch_tanh")
_QWEN2 = replace(_LLAMA, qkv_bias=True, output_bias=Flag("attention_bias", used=False))
_QWEN3 = replace(_LLAMA, head_dim=128, qk_norm=True)
_GPT2 = Dialect(
    family="gpt2",
    hidden=("n_embd", "hidden_size"),
    heads=("n_head", "num_attention_heads"),
    layers=("n_layer", "num_hidden_layers"),
    intermediate="n_inner",
    ffn_multiple=4,
    activation=("activation_function",),
    default_activation="gelu_new",
    positions=Positions(("n_positions", "max_position_embeddings"), 1024),
    hidden_dropout=Fraction("resid_pdrop", 0.1),
    attention_dropout=Fraction("attn_pdrop", 0.1),
    embedding_dropout=Fraction("embd_pdrop", 0.1),
)
_FALCON_NEW = Dialect(
    family="falcon",
    kv_heads=_falcon_grouped,
    bias=Flag("bias"),
    intermediate="ffn_hidden_size",
    ffn_multiple=4,
    activation=("activation",),
    alibi=Flag("alibi"),
    parallel=True,
    hidden_dropout=Fraction("hidden_dropout", 0.0),
)
_BERT = Dialect(
    family="bert",
    positions=Positions(("max_position_embeddings",), 512),
    token_types=True,
    hidden_dropout=Fraction("hidden_dropout_prob", 0.1),
    attention_dropout=Fraction("attention_probs_dropout_prob", 0.1),
    embedding_dropout=Fraction("hidden_dropout_prob", 0.1),
    encoder=True,
)

DIALECTS: dict[str, Dialect] = {
    "llama": _LLAMA,
    "mistral": _LLAMA,
    "qwen2": _QWEN2,
    "qwen3": _QWEN3,
    "gemma": _GEMMA,
    "gemma2": replace(_GEMMA, norms_per_layer=4, softcaps=True),
    "phi3": _LLAMA,
    "mixtral": replace(_LLAMA, experts=_mixtral),
    "qwen2_moe": replace(_QWEN2, experts=_qwen2_moe),
    "deepseek_v3": replace(_LLAMA, experts=_deepseek_v3, mla=True),
    "gemma3_text": replace(
        _GEMMA, qk_norm=True, norms_per_layer=4, sliding_window=4096, global_layers=True
    ),
    "qwen3_moe": replace(_QWEN3, experts=_qwen3_moe, sliding_window=None),
    "olmo2": replace(_LLAMA, qk_norm=True, qk_norm_full=True),
    "gpt2": _GPT2,
    # GPT-BigCode (StarCoder): GPT-2's block with multi-query attention, a tanh GELU.
    "gpt_bigcode": replace(_GPT2, kv_heads=_multi_query, default_activation="gelu_pytorch_tanh"),
    # StarCoder 2: OPT's block shape (pre-norm LayerNorms with biases, an ungated MLP)
    # with rotary positions and grouped-query attention.
    "starcoder2": Dialect(
        family="opt",
        kv_heads=_grouped,
        bias=Flag("use_bias", True),
        default_activation="gelu_pytorch_tanh",
        hidden_dropout=Fraction("residual_dropout", 0.0),
        embedding_dropout=Fraction("embedding_dropout", 0.0),
        sliding_window=0,
    ),
    "gpt_neox": Dialect(
        family="neox",
        tie=False,
        qkv_bias=Flag("attention_bias", True),
        output_bias=Flag("attention_bias", True),
        parallel=Flag("use_parallel_residual", True),
        hidden_dropout=Fraction("hidden_dropout", 0.0),
        rotary=Fraction("rotary_pct", 0.25),
    ),
    "opt": Dialect(
        family="opt",
        word_embed="word_embed_proj_dim",
        intermediate="ffn_dim",
        activation=("activation_function",),
        default_activation="relu",
        positions=Positions(("max_position_embeddings",), 2048, extra=2),
        qkv_bias=Flag("enable_bias", True),
        output_bias=Flag("enable_bias", True),
        mlp_bias=Flag("enable_bias", True),
        hidden_dropout=Fraction("dropout", 0.1),
    ),
    "falcon": replace(
        _FALCON_NEW,
        kv_heads=_multi_query,
        variant=("new_decoder_architecture", _FALCON_NEW),
        norms_per_layer=1,
        parallel=Flag("parallel_attn", True),
    ),
    "bert": _BERT,
    "roberta": replace(_BERT, positions=Positions(("max_position_embeddings",), 514)),
}
"""Every supported ``model_type``'s dialect, in the order the refusal lists them."""

SUPPORTED = tuple(DIALECTS)


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
                    "POST /v1/memory/trace (gpuplan trace --api) traces causal LMs, masked "
                    "LMs and encoder-decoders (T5, BART and other AutoModelForSeq2SeqLM "
                    "models, Whisper) from this config, and gpuplan trace module:function "
                    "any model in your own code",
                )
            ]
        )
    r = _Reader(config)
    arch = _architecture(r, model_type)
    r.check()
    return arch, assumptions


@dataclass(frozen=True)
class _Shape:
    """The dimensions, read in the family's own order, and the dialect as the config
    refined it (Falcon's new decoder architecture, a bias key that sets all three)."""

    dialect: Dialect
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    intermediate: int
    vocab: int
    word_embed_dim: int = 0
    moe: Moe | None = None
    mla: Mla | None = None


def _architecture(r: _Reader, model_type: str) -> Architecture:
    """Read the shape in the family's order, then the rest in one order for all."""
    dialect = DIALECTS[model_type]
    s = _llama_shape(r, dialect) if dialect.family == "llama" else _shape(r, dialect)
    d = s.dialect
    # Arguments are evaluated left to right: this is the order of the reads and their errors.
    return Architecture(
        model_type=model_type,
        family=d.family,
        num_layers=s.layers,
        hidden_size=s.hidden,
        num_heads=s.heads,
        num_kv_heads=s.kv_heads,
        head_dim=s.head_dim,
        intermediate_size=s.intermediate,
        vocab_size=s.vocab,
        tie_word_embeddings=r.bool("tie_word_embeddings", d.tie),
        mlp_gated=d.gated,
        activation=r.activation(*d.activation, default=d.default_activation),
        norm=d.norm,
        position="alibi" if _flag(r, d.alibi) else "learned" if d.positions else "rotary",
        learned_positions=_learned_positions(r, d.positions),
        token_types=r.int("type_vocab_size", default=2, minimum=0) if d.token_types else 0,
        qkv_bias=_flag(r, d.qkv_bias),
        output_bias=_flag(r, d.output_bias),
        mlp_bias=_flag(r, d.mlp_bias),
        qk_norm=d.qk_norm,
        qk_norm_full=d.qk_norm_full,
        norms_per_layer=d.norms_per_layer,
        parallel_residual=_flag(r, d.parallel),
        hidden_dropout=_fraction(r, d.hidden_dropout),
        attention_dropout=_fraction(r, d.attention_dropout),
        embedding_dropout=_fraction(r, d.embedding_dropout),
        word_embed_dim=s.word_embed_dim,
        rotary_fraction=_fraction(r, d.rotary),
        logit_softcap=d.softcaps and r.config.get("final_logit_softcapping", 30.0) is not None,
        attention_softcap=d.softcaps and r.config.get("attn_logit_softcapping", 50.0) is not None,
        sliding_window=_sliding_window(r, d.sliding_window),
        global_layers=_global_layers(r, s.layers) if d.global_layers else 0,
        moe=s.moe,
        mla=s.mla,
        encoder=d.encoder,
        rotary_positions=_rotary_positions(r, d.positions),
    )


def _llama_shape(r: _Reader, d: Dialect) -> _Shape:
    """The Llama family: the dimensions, the attention, then the MLP or its experts."""
    hidden = r.int(*d.hidden)
    layers = r.int(*d.layers, maximum=MAX_LAYERS)
    heads = r.int(*d.heads)
    vocab = r.int("vocab_size")
    kv, head_dim = d.kv_heads(r, hidden, heads)
    intermediate, moe = d.experts(r) if d.experts else (r.int(d.intermediate), None)
    mla = _mla(r) if d.mla else None
    if d.head_dim:
        head_dim = r.int("head_dim", default=d.head_dim)
    if mla is not None:
        kv, head_dim = heads, mla.qk_nope_head_dim + mla.qk_rope_head_dim
    return _Shape(d, hidden, heads, kv, head_dim, layers, intermediate, vocab, moe=moe, mla=mla)


def _shape(r: _Reader, d: Dialect) -> _Shape:
    """The other families: the width and heads, the attention, then depth, feed-forward
    width and vocabulary."""
    hidden = r.int(*d.hidden)
    heads = r.int(*d.heads)
    if d.variant and r.bool(d.variant[0], False):
        d = d.variant[1]
    kv, head_dim = d.kv_heads(r, hidden, heads)
    if d.bias:
        bias = _flag(r, d.bias)
        d = replace(d, qkv_bias=bias, output_bias=bias, mlp_bias=bias)
    word = r.int(d.word_embed, default=hidden) if d.word_embed else hidden
    layers = r.int(*d.layers, maximum=MAX_LAYERS)
    ffn_default = hidden * d.ffn_multiple if d.ffn_multiple else None
    intermediate = r.int(d.intermediate, default=ffn_default)
    vocab = r.int("vocab_size")
    word_embed_dim = word if word != hidden else 0
    return _Shape(d, hidden, heads, kv, head_dim, layers, intermediate, vocab, word_embed_dim)


def _flag(r: _Reader, flag: bool | Flag) -> bool:
    if isinstance(flag, Flag):
        return r.bool(flag.key, flag.default) and flag.used
    return flag


def _fraction(r: _Reader, fraction: float | Fraction) -> float:
    if isinstance(fraction, Fraction):
        return r.float(fraction.key, fraction.default)
    return fraction


def _learned_positions(r: _Reader, positions: Positions | None) -> int:
    if positions is None:
        return 0
    return r.int(*positions.keys, default=positions.default) + positions.extra


def _rotary_positions(r: _Reader, positions: Positions | None) -> int:
    """``max_position_embeddings`` of a model without a learned table (0: not given), the
    rows older transformers precomputed its rotary tables for."""
    if positions is not None:
        return 0
    return r.int("max_position_embeddings", default=0, minimum=0)


def _sliding_window(r: _Reader, absent: int | None) -> int:
    """The window a config sets; ``absent`` where it has no ``sliding_window`` key."""
    if absent is None:
        return 0
    if r.config.get("sliding_window"):
        return r.int("sliding_window", default=0, minimum=0)
    return absent if "sliding_window" not in r.config else 0


def _global_layers(r: _Reader, layers: int) -> int:
    """Gemma 3's layers that attend to the whole sequence: its ``layer_types``, or one in
    ``sliding_window_pattern`` (6, the config class's default)."""
    types = r.config.get("layer_types")
    if isinstance(types, list):
        return sum(1 for t in types if t == "full_attention")
    pattern = r.int("sliding_window_pattern", default=6)
    return layers // pattern
