"""Exact parameter counts from an :class:`Architecture`.

Counted tensor by tensor as the Hugging Face implementation creates them: biases,
learned position tables, untied heads and per-head norms all count, and a tied head
counts once. The model-building path of other estimators (``init_empty_weights``)
double-counts tied embeddings; this one is checked against transformers itself.
"""

from collections.abc import Sequence
from itertools import repeat
from operator import is_
from typing import TypeVar

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.record import Record

T = TypeVar("T")


class LayerParameters(Record):
    """Parameters of one transformer layer, split by what they feed."""

    attention: int
    mlp: int
    """Dense MLP, or all experts of an MoE layer plus router and shared expert."""

    norms: int
    active_mlp: int
    """MLP parameters one token touches (top-k experts plus shared)."""


class ParameterCount(Record):
    total: int
    embedding: int
    """Token (and position, type) embeddings, plus any input projection."""

    head: int
    """The output projection, 0 when tied to the embedding."""

    final: int
    """Final norm and any head transform (BERT's MLM dense and norm)."""

    layers: list[LayerParameters]

    @property
    def largest_layer(self) -> int:
        # Each kind of layer once: the layers of a kind share one record.
        return max((lp.attention + lp.mlp + lp.norms for lp in distinct(self.layers)), default=0)


def distinct(items: Sequence[T]) -> list[T]:
    """Each object of ``items`` once (by identity), in the order they first appear: the
    layers of a kind share one record, so a model's 80 layers are one or two kinds. A
    model of one kind, the common case, is told by one pass of identity tests (a search's
    estimates ask this a few hundred times a request)."""
    if items:
        first = items[0]
        if all(map(is_, items, repeat(first))):
            return [first]
    return list(dict(zip(map(id, items), items, strict=True)).values())


def _norm(arch: Architecture, width: int) -> int:
    return width if arch.norm == "rms" else 2 * width


def _dense_mlp(arch: Architecture, width: int) -> int:
    h = arch.hidden_size
    if arch.mlp_gated:
        return 3 * h * width + (2 * width + h if arch.mlp_bias else 0)
    return 2 * h * width + (width + h if arch.mlp_bias else 0)


def _attention(arch: Architecture) -> int:
    h = arch.hidden_size
    if arch.mla is not None:
        m = arch.mla
        heads = arch.num_heads
        q = (
            h * m.q_lora_rank
            + m.q_lora_rank
            + m.q_lora_rank * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
            if m.q_lora_rank
            else h * heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        )
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
        kv += m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + heads * m.v_head_dim * h
    q, kv = arch.q_dim, arch.kv_dim
    count = h * (q + 2 * kv) + q * h
    if arch.qkv_bias:
        count += q + 2 * kv
    if arch.output_bias:
        count += h
    if arch.qk_norm:
        count += q + kv if arch.qk_norm_full else 2 * arch.head_dim
    return count


def is_moe_layer(arch: Architecture, index: int) -> bool:
    """Whether layer ``index`` has routed experts (after the dense ones, every ``layer_frequency``)."""
    moe = arch.moe
    if moe is None or index < moe.dense_layers:
        return False
    return (index + 1) % moe.layer_frequency == 0


def count_parameters(arch: Architecture) -> ParameterCount:
    h, v = arch.hidden_size, arch.vocab_size
    attention = _attention(arch)
    norms = arch.norms_per_layer * _norm(arch, h)
    dense_mlp = _dense_mlp(arch, arch.intermediate_size)
    dense = LayerParameters(attention=attention, mlp=dense_mlp, norms=norms, active_mlp=dense_mlp)
    sparse = dense
    moe = arch.moe
    if moe is not None:
        expert = _dense_mlp(arch, moe.expert_intermediate_size)
        shared = (
            _dense_mlp(arch, moe.shared_intermediate_size) if moe.shared_intermediate_size else 0
        )
        router = h * moe.num_experts
        gate = h if moe.shared_expert_gate else 0
        sparse = LayerParameters(
            attention=attention,
            mlp=moe.num_experts * expert + shared + router + gate,
            norms=norms,
            active_mlp=moe.experts_per_token * expert + shared + router + gate,
        )
    # Records are values: the layers of one kind share one.
    layers = [sparse if is_moe_layer(arch, i) else dense for i in range(arch.num_layers)]
    word = arch.word_embed_dim or h
    embedding = v * word + arch.learned_positions * h + arch.token_types * h
    if arch.word_embed_dim:
        embedding += 2 * word * h  # OPT project_in and project_out
    final = _norm(arch, h)
    head = 0 if arch.tie_word_embeddings else v * word
    if arch.family == "bert":
        embedding += _norm(arch, h)  # embedding LayerNorm
        final = h * h + h + _norm(arch, h) + v  # MLM transform dense, its norm, decoder bias
    if arch.classifier:
        # A classifier replaces the language-model head (transformers' *ForSequence/
        # TokenClassification): decoders' ``score`` has no bias for sequences; BERT pools
        # the first token through a dense layer (RoBERTa's head has its own), and every
        # token classifier has a bias.
        labels = arch.num_labels
        head = h * labels + (0 if arch.head == "sequence_classification" else labels)
        final = _norm(arch, h) if arch.family != "bert" else 0
        if arch.family == "bert" and arch.head == "sequence_classification":
            head += h * h + h + labels
    total = embedding + head + final + sum(lp.attention + lp.mlp + lp.norms for lp in layers)
    return ParameterCount(total=total, embedding=embedding, head=head, final=final, layers=layers)
