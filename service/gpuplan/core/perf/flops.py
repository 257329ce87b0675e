"""Model FLOPs of a transformer step, per token.

A matmul of an ``m×k`` input by a ``k×n`` weight costs ``2mkn`` FLOPs, so a forward
pass costs 2 FLOPs per weight per token, and training (forward, gradient of the
input, gradient of the weight) 6 (Kaplan et al. 2020; EleutherAI's Transformer Math
101: C ≈ 6·P·D). Only weights a token multiplies count: for a mixture of experts the
routed-to experts (the *active* parameters), and no embedding lookup; the output
head (tied or not) is a real matmul.

Attention scores and their weighted sum add ``2·s·d_attn`` FLOPs per token per layer
for each of QKᵀ and AV over ``s`` keys, counted the PaLM way (Chowdhery et al. 2022,
appendix B: ``6N + 12·L·H·Q·T`` for training). A causal kernel that skips masked
blocks (SDPA, FlashAttention) does half of it; eager attention computes every score.
"""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.parameters import ParameterCount
from gpuplan.core.record import Record


class TokenFlops(Record, kw_only=True):
    """FLOPs per token of one pass, split into what the parameters and attention cost."""

    matmul_parameters: int
    """Weights one token multiplies: active layer weights plus the output head."""

    attention_per_context_token: float
    """Score and weighted-sum FLOPs per token per key it attends to (forward, all layers)."""


def token_flops(arch: Architecture | None, counts: ParameterCount | None, total: int) -> TokenFlops:
    """Per-token FLOP terms; a bare parameter count is read as all-matmul, no attention."""
    if arch is None or counts is None:
        return TokenFlops(matmul_parameters=total, attention_per_context_token=0.0)
    layers = sum(lp.attention + lp.active_mlp for lp in counts.layers)
    head = counts.head or counts.embedding if arch.vocab_size else 0
    d_attn = arch.num_heads * arch.head_dim
    return TokenFlops(
        matmul_parameters=layers + head,
        # QKᵀ and AV: 2 FLOPs per multiply-add, each over d_attn per key, every layer.
        attention_per_context_token=2 * 2 * d_attn * arch.num_layers,
    )


def forward_flops_per_token(t: TokenFlops, context: float, *, causal_skip: bool) -> float:
    """One forward pass: ``2N`` plus attention over ``context`` keys (halved when causal)."""
    attention = t.attention_per_context_token * context * (0.5 if causal_skip else 1.0)
    return 2 * t.matmul_parameters + attention
