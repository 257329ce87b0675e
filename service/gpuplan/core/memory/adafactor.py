"""Adafactor's optimizer state: factored second moments, counted tensor by tensor.

``torch.optim.Adafactor`` (torch 2.13.0, torch/optim/_adafactor.py, ``_init_group``)
keeps no first moment. For a parameter of two or more dimensions it keeps a row factor
of shape ``(..., rows, 1)`` and a column factor of shape ``(..., 1, cols)`` ("Row factor
of variance, NOT the same shape as grads"); for a vector, a ``variance`` the size of the
vector. So its state is the rows plus the columns of every matrix (times the leading
dimensions of a stacked one: MoE experts stored as one 3-D tensor factor each expert's
matrix), plus every bias and norm weight whole: a few per mille of the parameters, not a
fixed fraction of them.

A parameter the optimizer sees flattened (FSDP1's flat shards, whose original
parameters are 1-D views ``flat_param[offset : offset + numel_in_shard]`` in
``_use_sharded_views``; DeepSpeed's flat partitions) is a vector: its variance is whole.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.modules import linear_modules
from gpuplan.core.memory.parameters import ParameterCount


def _linear_factors(arch: Architecture, names: frozenset[str] | None) -> tuple[float, float]:
    """(Rows plus columns, count) of the linear modules in layers (``names``: only those)."""
    factors, count = 0.0, 0.0
    for name, m in linear_modules(arch).items():
        if not m.per_layer or (names is not None and name not in names):
            continue
        layers = m.per_layer * arch.num_layers
        factors += m.in_out_total or (m.in_features + m.out_features) * layers
        count += layers
    return factors, count


def _moe_excess(arch: Architecture, counts: ParameterCount) -> float:
    """What :func:`_linear_factors` counts beyond an MoE's tensors. transformers 5 stores
    an MoE layer's experts as ``gate_up_proj`` (experts × 2f × h) and ``down_proj``
    (experts × h × f), rows and columns 2f + h and h + f per expert, where separate gate,
    up and down projections would have 3f + 3h; and the router (``gate``, named once for
    every layer) exists only in the layers with experts (DeepSeek's first layers are
    dense)."""
    if arch.moe is None:
        return 0.0
    moe_layers = sum(1 for lp in counts.layers if lp.mlp != lp.active_mlp)
    h, experts = arch.hidden_size, arch.moe.num_experts
    return float(experts * moe_layers * h + (experts + h) * (arch.num_layers - moe_layers))


def _layer_vectors(arch: Architecture, counts: ParameterCount) -> float:
    """Biases and norm weights of the layers: kept whole."""
    h, f = arch.hidden_size, arch.intermediate_size
    q, kv = arch.q_dim, arch.kv_dim
    per_layer = 0.0
    if arch.qkv_bias:
        per_layer += q + 2 * kv
    if arch.output_bias:
        per_layer += h
    if arch.mlp_bias and arch.moe is None:
        per_layer += (2 * f if arch.mlp_gated else f) + h
    if arch.qk_norm:
        per_layer += q + kv if arch.qk_norm_full else 2 * arch.head_dim
    if arch.mla is not None:  # the norms of the query's and the key-value's latents
        per_layer += arch.mla.q_lora_rank + arch.mla.kv_lora_rank
    return sum(lp.norms for lp in counts.layers) + per_layer * arch.num_layers


def _outside_layers(arch: Architecture, counts: ParameterCount) -> float:
    """State of the embeddings, the final norm and the head."""
    h = arch.hidden_size
    word = arch.word_embed_dim or h
    state = float(arch.vocab_size + word)  # the word embedding
    if arch.learned_positions:
        state += arch.learned_positions + h
    if arch.token_types:
        state += arch.token_types + h
    if arch.word_embed_dim:
        state += 2 * (word + h)  # OPT's project_in and project_out
    if arch.classifier:
        labels = arch.num_labels
        pooler = h * h if arch.family == "bert" and arch.head == "sequence_classification" else 0
        state += h + labels + (2 * h if pooler else 0)  # the classifier's (and pooler's) weight
        state += counts.head - h * labels - pooler  # their biases
        if arch.family != "bert":
            state += counts.final
        return state
    if counts.head:
        state += arch.vocab_size + word  # an untied head
    if arch.family == "bert":
        # The embedding LayerNorm; the MLM transform's bias and LayerNorm and the
        # decoder's bias (its dense weight is among the layers' ``dense`` modules).
        return state + 2 * h + (counts.final - h * h)
    return state + counts.final


def state_elements(
    arch: Architecture,
    counts: ParameterCount,
    *,
    lora_rank: int = 0,
    adapted: frozenset[str] | None = None,
) -> float:
    """Elements of Adafactor's state over the trainable parameters of the whole model:
    every parameter, or (``lora_rank`` > 0) the LoRA adapters on the ``adapted``
    linears, each a ``rank × in`` and an ``out × rank`` matrix."""
    if lora_rank:
        factors, count = _linear_factors(arch, adapted or frozenset())
        return factors + 2.0 * lora_rank * count
    factors, _ = _linear_factors(arch, None)
    factors -= _moe_excess(arch, counts)
    return factors + _layer_vectors(arch, counts) + _outside_layers(arch, counts)
