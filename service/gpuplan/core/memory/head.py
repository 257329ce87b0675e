"""The parts of a step outside the layers: embeddings, the final norm, logits and loss."""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.dims import Dims
from gpuplan.core.memory.numerics import FP32, Numerics
from gpuplan.core.record import Record


class HeadCost(Record, kw_only=True):
    embedding_saved: float
    """Token ids and whatever the embedding stage keeps for backward."""

    final_saved: float
    """Final norm (and MLM transform) plus the head's input."""

    logits_saved: float
    """What the loss keeps for backward (Hugging Face: fp32 log-softmax of every position)."""

    loss_forward: float
    """Extra bytes alive while the loss is computed, above ``logits_saved``."""

    loss_backward: float
    """Extra bytes at the loss backward (the gradient of log-softmax and of the logits)."""

    norm_backward: float = 0.0
    """Extra bytes at the final norm's backward, beyond what it saved (0: not a moment
    of its own). Hugging Face's RMSNorm computes in fp32 (``x.pow(2).mean(-1)``,
    ``x * torch.rsqrt(...)``): its backward holds the gradient of ``x`` from the product,
    the mean's expanded gradient and pow's three (``pow_backward``: ``grad * (exponent *
    self.pow(exponent - 1))``, torch 2.13 tools/autograd/FunctionsManual.cpp), five fp32
    tensors of the hidden state at once (measured: a Llama classifier's step on this
    CPU peaks there, its logits being small), less what the head's and ``weight *``'s
    backward freed before it."""


def head_cost(
    arch: Architecture,
    d: Dims,
    num: Numerics,
    *,
    training: bool,
    head_trains: bool,
    fused: bool = False,
    megatron: bool = False,
) -> HeadCost:
    """``fused``: flash-attention's training GPT (``workload.fused_kernels``), see
    :func:`_fused_gpt_head`. ``megatron``: Megatron-core's vocab-parallel cross-entropy
    (see below)."""
    m, r, e, ef, tv = num.matmul, num.residual, d.hidden, d.hidden_full, d.logits
    ids = 8.0 * d.tokens
    if arch.classifier:
        return _classifier(arch, d, num, training=training, head_trains=head_trains)
    embedding = ids
    if training and arch.embedding_dropout > 0:
        embedding += num.dropout_mask * e
    if fused and training:
        return _fused_gpt_head(arch, d, num, embedding)
    if arch.family == "bert":
        embedding += r * e  # embedding LayerNorm input
    # Final norm (see layers._rms_norm: the normalized tensor only for its weight's
    # gradient, which a LoRA step's frozen norm has not), and the head's input when the
    # head trains (a frozen head needs only its weight to pass the gradient on).
    normalized = (FP32 if num.amp else m) if head_trains else 0
    final = (FP32 + normalized) * e if arch.norm == "rms" else r * e
    if head_trains:
        final += (2.0 if num.amp else num.saved_linear_input) * ef
    if arch.family == "bert":
        final += 3 * m * ef  # MLM transform: dense input, GELU input, LayerNorm input
        # BertForMaskedLM takes cross-entropy of the logits in their own dtype.
        return HeadCost(
            embedding_saved=embedding,
            final_saved=final,
            logits_saved=m * tv,
            loss_forward=m * tv,
            loss_backward=2 * m * tv,
        )
    softcap = m * tv if arch.logit_softcap else 0.0  # Gemma-2 keeps tanh's output
    if megatron and training:
        # Megatron-core's vocab_parallel_cross_entropy (megatron/core/tensor_parallel/
        # cross_entropy.py at d98e8a64dd), unfused: an fp32 copy of the logits, made
        # beside the 16-bit ones, turned into the softmax in place (``torch.exp(...,
        # out=exp_logits)``, ``exp_logits.div_``) and kept; the backward writes the
        # gradient over it (``grad_input = softmax``, ``grad_input.mul_``), and autograd
        # casts it to the logits' 16 bits beside it.
        return HeadCost(
            embedding_saved=embedding,
            final_saved=final + softcap,
            logits_saved=FP32 * tv,
            loss_forward=m * tv,
            loss_backward=m * tv,
        )
    # Causal LM loss (transformers ForCausalLMLoss): logits.float(), then cross-entropy,
    # whose log-softmax output is kept. Its backward holds log-softmax, its gradient and
    # the logits' gradient, all fp32, at once.
    upcast = FP32 * tv if m != FP32 else 0.0
    return HeadCost(
        embedding_saved=embedding,
        final_saved=final + softcap,
        logits_saved=FP32 * tv,
        loss_forward=m * tv + upcast,
        loss_backward=2 * FP32 * tv,
        norm_backward=_rms_norm_backward(arch, e, final) if training else 0.0,
    )


def _fused_gpt_head(arch: Architecture, d: Dims, num: Numerics, embedding: float) -> HeadCost:
    """flash-attention's training GPT: the final dropout-add-LayerNorm keeps the fp32
    residual sum, its dropout mask and two fp32 statistics per token; the head its
    input; and its cross-entropy (``flash_attn.losses.cross_entropy.CrossEntropyLoss``
    with ``inplace_backward: True``, as training/configs/experiment/pile/base.yaml sets
    it) keeps the 16-bit logits and a log-sum-exp per token, and writes the logits'
    gradient over them (flash_attn/losses/cross_entropy.py at 0b037c2d): no fp32 copy
    and no gradient beside them."""
    m, e, tv = num.matmul, d.hidden, d.logits
    mask = num.dropout_mask * e if arch.hidden_dropout > 0 else 0.0
    final = FP32 * e + mask + 2 * FP32 * d.tokens + m * d.hidden_full
    return HeadCost(
        embedding_saved=embedding,
        final_saved=final,
        logits_saved=m * tv + FP32 * d.tokens,
        loss_forward=FP32 * d.tokens,
        loss_backward=0.0,
    )


def _rms_norm_backward(arch: Architecture, e: float, final: float) -> float:
    """See :attr:`HeadCost.norm_backward` (LayerNorm's fused backward: not a moment).
    By then the head's backward freed its input and ``weight *``'s backward the
    normalized tensor, all of ``final`` but the norm's fp32 input."""
    return 5.0 * FP32 * e - (final - FP32 * e) if arch.norm == "rms" else 0.0


def _classifier(
    arch: Architecture, d: Dims, num: Numerics, *, training: bool, head_trains: bool
) -> HeadCost:
    """A classification head: the labels' logits are small; what stays is the classifier's
    input. Decoders score every position and pool the last; BERT pools the first token
    through a dense layer, or classifies every token after a dropout."""
    m, r, e, ef = num.matmul, num.residual, d.hidden, d.hidden_full
    labels = arch.num_labels
    per_token = arch.head == "token_classification" or arch.family != "bert"
    positions = d.tokens if per_token else d.batch
    logits = float(positions * labels)
    embedding = 8.0 * d.tokens
    if arch.family == "bert":
        embedding += r * e + (num.dropout_mask * e if training and arch.embedding_dropout else 0.0)
        if per_token:
            drop = (num.dropout_mask + m) * ef if training and arch.hidden_dropout else 0.0
            final = drop + (0.0 if drop else m * ef)
        else:
            final = 3.0 * m * d.batch * arch.hidden_size  # pooled token, tanh, classifier input
    else:
        normalized = (FP32 if num.amp else m) if head_trains else 0
        norm = (FP32 + normalized) * e if arch.norm == "rms" else r * e
        final = norm + (m * ef if head_trains else 0.0)
    return HeadCost(
        embedding_saved=embedding,
        final_saved=final,
        logits_saved=FP32 * logits,
        loss_forward=(m + FP32) * logits,
        loss_backward=2 * FP32 * logits,
        norm_backward=(
            _rms_norm_backward(arch, e, final) if training and arch.family != "bert" else 0.0
        ),
    )
