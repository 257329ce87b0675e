"""What one transformer layer keeps for backward, and what its backward adds on top.

Counted tensor by tensor as PyTorch's autograd saves them in the Hugging Face
implementations: an op saves exactly what its derivative needs (``q * cos`` saves
``cos``, not ``q``; a frozen linear saves nothing of its input), a view keeps its
whole storage alive, and reshaping a transposed view for a batched matmul copies it.
Each term below names the tensor it stands for; docs/accuracy.md checks the totals
against real steps.

Units: :class:`Dims` counts elements; everything returned is bytes for one layer,
one micro-batch, one GPU.
"""

import msgspec

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.dims import Dims
from gpuplan.core.memory.kernels import unrepeated_multi_query
from gpuplan.core.memory.layers_records import LayerCost, Step, Trainable
from gpuplan.core.memory.modules import Linear, linear_modules
from gpuplan.core.memory.numerics import FP32, Numerics

# Families whose eager attention runs softmax in fp32 and casts the probabilities back.
_FP32_SOFTMAX = ("llama", "neox", "opt")


def _rms_norm(arch: Architecture, n: float, num: Numerics, trains: bool) -> float:
    """RMSNorm: an fp32 view of the input (the input itself when fp32) kept by pow and
    mul, and, when the weight trains, the normalized tensor ``weight *`` multiplies:
    fp32 under autocast and in Gemma (``x * (1 + weight.float())``), else the dtype."""
    normalized = 0.0
    if trains:
        normalized = float(FP32 if num.amp or _fp32_norm(arch) else num.matmul)
    return (FP32 + normalized) * n


def _fused_norm(d: Dims, num: Numerics) -> float:
    """A fused norm: its input (the residual stream) and one fp32 statistic per token."""
    return num.residual * d.hidden + FP32 * d.tokens


def _saved_input(d: Dims, step: Step) -> float:
    """Elements a column-parallel linear keeps of its input: the gathered input, or its
    sequence shard under Megatron's sequence parallelism."""
    return d.hidden if step.sharded_linear_inputs else d.hidden_full


def _fp32_norm(arch: Architecture) -> bool:
    """RMSNorms that keep their normalized tensor in fp32 for the weight's gradient:
    Gemma's ``x * (1 + weight.float())`` and OLMo 2's ``(weight * x).to(dtype)``, where
    x is the fp32 normalized input."""
    return arch.model_type in ("gemma", "gemma2", "gemma3_text", "olmo2")


def _inputs(n: float, num: Numerics, readers: int) -> float:
    """A tensor of ``n`` elements kept by ``readers`` linears: shared, except that under
    autocast each linear keeps its own low-precision cast of an fp32 input."""
    if readers <= 0:
        return 0.0
    if num.amp:
        return 2.0 * n * readers
    return num.saved_linear_input * n


def _math_fallback(
    arch: Architecture, d: Dims, num: Numerics, *, eager: bool, dropout: bool
) -> bool:
    """Does SDPA run its math path (see :func:`_core`)?"""
    multi_query = unrepeated_multi_query(arch, heads=d.heads, kv_heads=d.kv_heads)
    mla = arch.mla
    narrow_v = mla is not None and mla.v_head_dim != mla.qk_nope_head_dim + mla.qk_rope_head_dim
    return not eager and ((dropout and num.cpu) or multi_query or (narrow_v and num.cpu))


def _core(
    arch: Architecture, d: Dims, num: Numerics, step: Step, *, dropout: bool, v_storage: float
) -> tuple[float, float, float]:
    """Attention core: (saved, backward peak extra, no-grad forward peak).

    The forward peak counts the query and the head-repeated k and v the core reads,
    the scores and their softmax; the layer adds the residual stream around it.
    """
    eager = step.eager
    # SDPA falls back to its math path, which materializes the scores, when no fused
    # kernel takes the call: on the CPU with dropout, and everywhere for Falcon's
    # multi-query attention, which hands SDPA one key/value head for all query heads
    # without ``enable_gqa`` (the fused kernels need equal head counts). The CPU's math
    # path computes in fp32 for half inputs (it upcasts q, k and v first). MLA's value
    # heads are narrower than its query/key heads, which only CUDA's memory-efficient
    # kernel accepts: on the CPU that is the math path too.
    mla = arch.mla
    math_fallback = _math_fallback(arch, d, num, eager=eager, dropout=dropout)
    m = FP32 if math_fallback and num.cpu and num.matmul != FP32 else num.matmul
    if eager or math_fallback:
        repeated = d.kv_heads < d.heads
        k = m * (d.query if repeated else d.key)  # repeat_kv copies k and v to every head
        v = m * d.query if repeated or math_fallback else v_storage
        if mla is not None:  # values of v_head_dim per head
            v = float(m * d.tokens * d.heads * mla.v_head_dim)
        fp32_softmax = (
            arch.family in _FP32_SOFTMAX or arch.model_type == "gpt_bigcode"
        ) and not math_fallback
        # The fp32 softmax output (its backward reads it), and its cast back to the
        # activation dtype unless dropout follows (which keeps only its mask).
        cast = m if m != FP32 and not dropout else 0
        probs = (FP32 + cast) * d.scores if fp32_softmax else m * d.scores
        if arch.attention_softcap:
            probs += m * d.scores  # tanh keeps its output
        if dropout:
            # The mask (CUDA: a bool; CPU: a noise tensor, fp32 on the upcast math path)
            # and the dropped-out probabilities.
            probs += ((m if math_fallback else num.dropout_mask) + m) * d.scores
        # Scores, then softmax: fp32 output from half scores, which the CPU kernel first
        # converts to an fp32 copy (CUDA's kernel reads the half input directly).
        convert = FP32 * d.scores if fp32_softmax and m != FP32 and num.cpu else 0.0
        forward = (m + (FP32 if fp32_softmax else m)) * d.scores + convert
        if math_fallback:
            # SDPA's math path runs _safe_softmax, which holds a byte per score (the
            # mask of -inf inputs) beside its output inside the kernel.
            forward += d.scores
        if step.selective:
            probs = 0.0  # recomputed in the backward, so the backward holds them again
        saved = m * d.query + k + v + probs
        # The gradient of the probabilities, then of the scores: two score-sized
        # tensors at once (dropout's backward replaces the first, it does not add one).
        # The value matmul's backward, which made the first, freed the value it kept as
        # it made the value's gradient, of the same size; the query's and key's
        # gradients come only after the softmax's backward, once the probabilities and
        # their gradient are freed (a score-sized tensor for a query-sized one).
        backward = ((m + FP32) if fp32_softmax else 2 * m) * d.scores
        if dropout and not step.selective:
            # The dropped-out probabilities are kept for the value matmul's backward
            # only: freed once it ran, before dropout's backward adds its gradient.
            backward -= m * d.scores
        # The same backward freed its incoming gradient, the attention output's, which
        # the layer counts beside every core backward (see _cost).
        backward += (forward if step.selective else 0.0) - m * d.query
        forward += m * d.query + (2 * m * d.query if repeated else 0.0)
        return saved, backward, forward
    m = num.matmul
    # Fused kernels (SDPA flash / memory-efficient) keep q, k, v, their output (counted
    # as the output projection's input) and one fp32 log-sum-exp per query.
    saved = m * (d.query + d.key) + v_storage + FP32 * d.lse
    backward = m * (d.query + 2 * d.key) + (FP32 * d.query if m != FP32 else 0.0)
    forward = 2 * m * d.query + FP32 * d.lse  # q and the output
    return saved, backward, forward


def _gated_mlp(d_ffn: float, m: int, trains_down: bool) -> float:
    """gate (for act), act and up (for their product), the product (for down)."""
    return 3 * m * d_ffn + (m * d_ffn if trains_down else 0.0)


def _gated_mlp_backward(d_ffn: float, m: int, t: Trainable) -> float:
    """Bytes the gated MLP's backward adds to what it saved, at the product's backward:
    the gradient of ``act(gate) * up`` (from the down projection's backward) and the two
    it computes, one per factor.

    Where the down projection's input is kept (its weight trains, or an adapter reads
    it), that backward frees it, the product, first. A frozen, unadapted down
    projection never kept it: autograd saves a matmul's input only for the weight's
    gradient (``mm``: ``mat2: mm_mat2_backward(grad, self, ...)`` in
    tools/autograd/derivatives.yaml, torch 2.13; the generated node saves ``self`` only
    when ``mat2`` needs its gradient), so nothing is freed and all three are new (a
    LoRA step on q and v measured on this CPU: gate, act and up stay, the product does
    not)."""
    return (2 if t.saves("down_proj") else 3) * m * d_ffn


def _plain_mlp(arch: Architecture, d_ffn: float, m: int) -> float:
    """fc1 output kept by the activation, and the activation's output kept by fc2."""
    if arch.activation == "gelu_new":
        return 5 * m * d_ffn  # GPT-2's tanh GELU written out keeps x, tanh, 0.5x, 1+tanh
    if arch.activation == "relu":
        return m * d_ffn  # relu keeps its output, which is also fc2's input
    return 2 * m * d_ffn


def _moe(
    arch: Architecture, d: Dims, num: Numerics, *, grouped_mlp: bool = False, act: float = 0.0
) -> tuple[float, float, float]:
    """Routed experts with grouped matmuls: (saved, backward extra, forward peak).

    ``grouped_mlp``: Megatron-core's ``TEGroupedMLP`` (NVIDIA/Megatron-LM
    megatron/core/transformer/moe/experts.py at d98e8a64dd) behind its token dispatcher,
    which keep less than an eager MoE block. The permutations keep only their indices
    (``permute`` and ``unpermute`` gather and scatter rows by them), and the router
    probabilities are applied inside the activation (``weighted_bias_swiglu_impl`` with
    ``permuted_probs``), so no expert output is kept for their gradient. What stays, per
    routed (token, expert) pair: fc1's input as Transformer Engine's ``GroupedLinear``
    saves it (an fp8 copy under an fp8 recipe), fc1's output for the SwiGLU's backward,
    the pair's fp32 probability, and fc2's input (fp8 likewise). ``act``: bytes per
    element the fused SwiGLU keeps of its input (0: the matmul dtype's)."""
    moe = arch.moe
    assert moe is not None
    m = num.matmul
    pairs = d.tokens * moe.experts_per_token  # (token, expert) pairs
    pair_h = pairs * arch.hidden_size
    pair_f = pairs * moe.expert_intermediate_size
    router = FP32 * d.tokens * moe.num_experts  # fp32 softmax of the router logits
    act = act if arch.mlp_gated else 0.0  # the fused GELU has no fp8 input store
    if grouped_mlp:
        kept = num.saved_linear_input
        fc1_out = 2.0 if arch.mlp_gated else 1.0
        saved = router + kept * (pair_h + pair_f) + (act or m) * fc1_out * pair_f + FP32 * pairs
    else:
        # Gathered tokens, gate_up output (kept whole through the gate view), act, act*up,
        # and the expert output kept by its routing-weight scale.
        saved = router + m * (2.0 * pair_h + 4.0 * pair_f)
    if moe.shared_intermediate_size:
        shared = d.tokens * moe.shared_intermediate_size
        if grouped_mlp:
            # Megatron's shared expert is a plain MLP of Transformer Engine linears and a
            # fused SwiGLU: fc1's own (fp8) copy of its input, the SwiGLU's input, fc2's.
            kept = num.saved_linear_input
            saved += kept * (d.hidden_full + shared) + 2 * (act or m) * shared
        else:
            saved += 4 * m * shared
        saved += m * d.hidden_full if moe.shared_expert_gate else 0.0
    return saved, 2 * m * pair_f + m * pair_h, m * (pair_h + 3 * pair_f)


def _moe_half(
    arch: Architecture, d: Dims, num: Numerics, step: Step, ef: float
) -> tuple[float, float, float, float]:
    """An MoE layer's MLP half: (saved, backward extra, forward peak) of the experts
    (:func:`_moe`), and what the MLP input costs to keep."""
    if step.fused_activation and step.trainable.full:
        # Megatron-core's experts; the router's gating linear, a matmul of its own
        # (megatron/core/transformer/moe/router.py), keeps the MLP input in 16 bits.
        experts = _moe(arch, d, num, grouped_mlp=True, act=step.activation_input_bytes)
        return (*experts, num.matmul * ef)
    # Forward: the gathered tokens and the experts' temporaries; the router and the
    # gathered copies read the input.
    return (*_moe(arch, d, num), _inputs(ef, num, 1))


def _attention_inputs(ef: float, num: Numerics, step: Step, *, fused: bool) -> tuple[float, int]:
    """What the attention half's linears keep of the norm's output, and how many q, k, v
    adapters read it. Under Megatron (NeMo's adapters) the frozen ``linear_qkv`` keeps
    no input (Transformer Engine saves a linear's input for its weight's gradient only)
    and an adapter on q, k or v is one adapter on it, keeping the norm's output in the
    model's dtype (its own ``linear_in`` is not an fp8 one)."""
    t, m = step.trainable, num.matmul
    qkv_adapters = t.adapters("q_proj", "k_proj", "v_proj", "qkv_proj")
    nemo = step.fused_qkv and not t.upcast
    if nemo:
        qkv_adapters = min(qkv_adapters, 1)
    if nemo and not t.weights_grad:
        return m * ef * qkv_adapters, qkv_adapters
    if t.upcast:
        return t.copy_bytes(m) * ef * qkv_adapters, qkv_adapters
    readers = (1 if fused else 3) if t.weights_grad else qkv_adapters
    return _inputs(ef, num, readers), qkv_adapters


def _megatron_mlp(
    d: Dims, num: Numerics, ef: float, step: Step
) -> tuple[float, float, float, float]:
    """(kept, input kept, backward peak, forward peak) of a gated MLP under Megatron:
    the fused SwiGLU keeps fc1's output (in fp8 with its fp8 input store) whether or not
    the weights train (its backward reads its input). In full training fc1 keeps its
    input and fc2 the SwiGLU's product, each as its linear saves it; with a frozen base
    they keep none, and their adapters (one on ``linear_fc1`` for gate or up, one on
    ``linear_fc2``) keep theirs in the model's dtype and their rank-wide outputs."""
    t, m = step.trainable, num.matmul
    kept = 2 * (step.activation_input_bytes or m) * d.ffn
    if t.full:
        kept += num.saved_linear_input * d.ffn
        kept_in = _inputs(ef, num, 1)
    else:
        fc1_adapters = min(t.adapters("gate_proj", "up_proj", "gate_up_proj"), 1)
        fc2_adapters = t.adapters("down_proj")
        kept += m * d.ffn * fc2_adapters
        kept += t.lora_rank * d.tokens * m * (fc1_adapters + fc2_adapters)
        kept_in = m * ef * fc1_adapters
    return kept, kept_in, 2 * m * d.ffn, 3 * m * d.ffn


def llama_layer(
    arch: Architecture, d: Dims, num: Numerics, step: Step, *, moe_layer: bool
) -> LayerCost:
    """Llama, Mistral, Qwen2/3, Gemma/Gemma-2, Phi-3, Mixtral, Qwen2-MoE, DeepSeek-V3."""
    t = step.trainable
    eager = step.eager
    m, e, ef = num.matmul, d.hidden, _saved_input(d, step)
    fused = arch.model_type == "phi3"  # qkv_proj and gate_up_proj
    norm = _fused_norm(d, num) if step.fused_norms else _rms_norm(arch, e, num, t.weights_grad)
    attn_in, qkv_adapters = _attention_inputs(ef, num, step, fused=fused)
    rank_bytes = t.copy_bytes(m) if t.upcast else m  # lora_B keeps lora_A's output
    lora = t.lora_rank * d.tokens * rank_bytes * (qkv_adapters + t.adapters("o_proj"))
    qk_normalized = FP32 if _fp32_norm(arch) or num.amp else m
    qk_norm = (FP32 + qk_normalized) * (d.query + d.key) if arch.qk_norm else 0.0
    if arch.mla is not None:
        # Latent attention: the q and kv low-rank projections each go through an
        # RMSNorm (see _rms_norm) whose output the up-projection keeps.
        q_rank = float(d.tokens * arch.mla.q_lora_rank)
        kv_rank = float(d.tokens * arch.mla.kv_lora_rank)
        qk_norm += _rms_norm(arch, q_rank, num, t.weights_grad) + m * q_rank
        qk_norm += _rms_norm(arch, kv_rank, num, t.weights_grad) + m * kv_rank
    v_storage = m * (d.query + 2 * d.key) if fused else m * d.key  # phi3's v is a view of qkv
    core, core_bw, core_fw = _core(arch, d, num, step, dropout=False, v_storage=v_storage)
    out_in = m * d.query if (not eager or (t.saves("o_proj") and not t.upcast)) else 0.0
    if t.upcast and t.adapters("o_proj"):
        out_in += t.copy_bytes(m) * d.query
    post_norms = (
        2 * (FP32 + (FP32 if t.weights_grad else 0.0)) * e if arch.norms_per_layer == 4 else 0.0
    )
    if moe_layer:
        mlp, mlp_bw, mlp_fw, mlp_in = _moe_half(arch, d, num, step, ef)
    elif step.fused_activation and not t.upcast:  # Megatron's one fc1 and fused SwiGLU
        mlp, mlp_in, mlp_bw, mlp_fw = _megatron_mlp(d, num, ef, step)
    else:
        mlp = _gated_mlp(d.ffn, m, t.saves("down_proj") and not t.upcast)
        mlp += (
            t.lora_rank
            * d.tokens
            * rank_bytes
            * t.adapters("gate_proj", "up_proj", "down_proj", "gate_up_proj")
        )
        gate_up = t.adapters("gate_proj", "up_proj", "gate_up_proj")
        if t.upcast:
            mlp += t.copy_bytes(m) * d.ffn * t.adapters("down_proj")
            mlp_in = t.copy_bytes(m) * ef * gate_up
        else:
            mlp_in = _inputs(ef, num, (1 if fused else 2) if t.weights_grad else gate_up)
        # act(gate), up and their product; Phi-3's fused gate_up output holds gate and up
        # as views, alive until the product is formed.
        mlp_bw, mlp_fw = _gated_mlp_backward(d.ffn, m, t), (4 if fused else 3) * m * d.ffn
    mlp_half = norm + mlp_in + mlp + post_norms / 2
    saved = norm + attn_in + lora + qk_norm + core + out_in + post_norms / 2 + mlp_half
    if step.compiled and not moe_layer and not (step.fused_activation and not t.upcast):
        # Inductor fuses each norm (keeping its input and one fp32 rstd per token instead
        # of an fp32 copy and the normalized tensor) and SiLU(gate) * up, which its
        # backward recomputes from the gate and up projections (SiLU's output and the
        # product, the down projection's input, are not kept).
        fused_norm = m * e + FP32 * d.tokens
        product = m * d.ffn if (t.saves("down_proj") and not t.upcast) else 0.0
        fewer = (norm - fused_norm) + m * d.ffn + product
        mlp_half -= fewer
        saved -= fewer + (norm - fused_norm)
    width = (
        d.ffn
        if not moe_layer
        else d.tokens * (arch.moe.expert_intermediate_size if arch.moe else 0)
    )
    # torchtitan's op policy: outputs of SDPA (with its log-sum-exp) and of matmuls 1, 3,
    # 5 and 7 in forward order (wq, wv, w1, w2) are kept; the rest is recomputed.
    op_saved = num.residual * e + m * (d.query + d.key + d.query) + FP32 * d.lse + m * width + m * e
    return msgspec.structs.replace(
        _cost(
            arch,
            d,
            num,
            saved=saved,
            mlp_half=mlp_half,
            mlp_bw=mlp_bw,
            core_bw=core_bw,
            forward=max(core_fw, mlp_fw + num.residual * d.hidden),
        ),
        op_saved=op_saved,
    )


def layernorm_layer(arch: Architecture, d: Dims, num: Numerics, step: Step) -> LayerCost:
    """GPT-2, GPT-NeoX, OPT, Falcon and BERT/RoBERTa layers (LayerNorm, plain MLP)."""
    m, r, e, ef = num.matmul, num.residual, d.hidden, _saved_input(d, step)
    t, eager = step.trainable, step.eager
    hidden_drop = step.training and arch.hidden_dropout > 0
    attn_drop = step.training and arch.attention_dropout > 0
    mask = num.dropout_mask * e if hidden_drop else 0.0
    if step.fused_activation and t.full:
        mlp = m * d.ffn + num.saved_linear_input * d.ffn  # fc1's output; the activation's
    else:
        mlp = _plain_mlp(arch, d.ffn, m)
    family = arch.family
    qkv_in = _inputs(
        ef,
        num,
        1
        if t.saves(
            "c_attn", "query_key_value", "q_proj", "k_proj", "v_proj", "query", "key", "value"
        )
        else 0,
    )
    fc_in = _inputs(
        ef, num, 1 if t.saves("c_fc", "dense_h_to_4h", "fc1", "intermediate.dense") else 0
    )
    if family == "gpt2":
        v_storage = m * d.key if eager else m * (d.query + 2 * d.key)
        core, core_bw, core_fw = _core(arch, d, num, step, dropout=attn_drop, v_storage=v_storage)
        # The query is a view of c_attn's output: its keys and values stay alive beside
        # the cache's copies of them while the attention runs.
        core_fw += 2 * m * d.key
        if step.fused_gpt and t.full:
            attn, mlp_half = _fused_gpt_halves(d, num, mask)
        else:
            # ln_1 input; c_attn's input; its q/k/v are views, copied for the batched
            # matmul. SDPA keeps the views: c_attn's output (q and, with multi-query, one
            # k and v head).
            attn = r * e + qkv_in + core + m * d.query + mask
            mlp_half = r * e + fc_in + mlp + mask  # ln_2 input (residual sum)
    elif family == "neox":
        # One input for both norms (parallel residual); q, k rebuilt by rotary; q, k and
        # v are split into copies, and the attention output is copied once more before
        # the dense projection.
        core, core_bw, core_fw = _core(arch, d, num, step, dropout=attn_drop, v_storage=m * d.key)
        out_copy = m * d.query if not eager else 0.0
        attn = r * e + qkv_in + core + m * d.query + out_copy
        mlp_half = fc_in + mlp + (0.0 if arch.parallel_residual else r * e)
    elif family == "opt":
        core, core_bw, core_fw = _core(arch, d, num, step, dropout=attn_drop, v_storage=m * d.key)
        attn = r * e + qkv_in + core + m * d.query + mask
        mlp_half = r * e + fc_in + mlp + mask
    elif family == "falcon":
        v_storage = m * (d.query + 2 * d.key)  # q, k, v are views of the fused projection
        core, core_bw, core_fw = _core(arch, d, num, step, dropout=attn_drop, v_storage=v_storage)
        norms = r * e * (2 if arch.norms_per_layer == 2 else 1)
        attn = norms + qkv_in + core + m * d.query
        mlp_half = mlp + (fc_in if arch.norms_per_layer == 2 else 0.0)
    else:  # bert: post-norm; the layer input is kept by q, k and v
        core, core_bw, core_fw = _core(arch, d, num, step, dropout=attn_drop, v_storage=m * d.key)
        attn = qkv_in + core + m * d.query + mask + r * e  # + LN1 input
        mlp_half = fc_in + mlp + mask + r * e  # + LN2 input
    mlp_bw = _plain_mlp_backward(arch, d, num, step, mask)
    # No-grad MLP: fc1's output and the activation's (GPT-2's written-out GELU holds
    # x, 0.5x and two temporaries at its deepest).
    mlp_fw = (4 if arch.activation == "gelu_new" else 2) * m * d.ffn
    if family == "gpt2":
        # GPT-2's block holds its attention output (a local) beside the MLP's input and
        # the residual sum (the residual stream counted around either half) while the MLP
        # runs.
        mlp_fw += m * d.hidden_full
    return _cost(
        arch,
        d,
        num,
        saved=attn + mlp_half,
        mlp_half=mlp_half,
        mlp_bw=mlp_bw,
        core_bw=core_bw,
        forward=max(core_fw, mlp_fw + num.residual * d.hidden),
    )


def _plain_mlp_backward(
    arch: Architecture, d: Dims, num: Numerics, step: Step, mask: float
) -> float:
    """What a plain MLP's backward adds at its peak, in the activation's backward. By
    then the second linear's backward has freed its input (the activation's output,
    unless relu keeps it as its own) and the dropout after it its mask. Beside what is
    left: GPT-2's written-out GELU holds the incoming gradient and the two of its last
    product; GELU the incoming gradient and its own; relu both beside its kept output."""
    m = num.matmul
    dropped = mask if arch.family in ("gpt2", "opt", "bert") else 0.0
    if step.fused_activation and step.trainable.full:
        return 2 * m * d.ffn
    if arch.activation == "relu":
        return 2 * m * d.ffn - dropped
    return (3 if arch.activation == "gelu_new" else 2) * m * d.ffn - (m * d.ffn + dropped)


def _fused_gpt_halves(d: Dims, num: Numerics, mask: float) -> tuple[float, float]:
    """What flash-attention's training GPT keeps of a layer (``fused_dropout_add_ln``,
    ``fused_bias_fc``, ``fused_mlp``, ``residual_in_fp32``, FlashAttention;
    Dao-AILab/flash-attention at 0b037c2d, training/configs/experiment/pile/gpt3s-flash.yaml),
    as (attention half, MLP half). Each dropout-add-LayerNorm keeps the residual sum it
    normalizes, in fp32, its dropout mask (a byte) and two fp32 statistics per token
    (flash_attn/ops/layer_norm.py: ``save_for_backward(xmat, x0_saved, dmask, gamma, mu,
    rsigma, ...)``); its output is the next linear's saved input (``FusedDenseFunc`` saves
    ``x``, flash_attn/ops/fused_dense.py). FlashAttention keeps the packed qkv, its output
    (the output projection's input) and a log-sum-exp per head and query. The fused MLP
    at ``checkpoint_lvl`` 0 keeps its input, the pre-activation and the GELU's output
    (``save_for_backward(x, weight1, weight2, pre_act, output1)``)."""
    m = num.matmul
    norm = FP32 * d.hidden + mask + 2 * FP32 * d.tokens
    attention = norm + m * d.hidden_full + m * (d.query + 2 * d.key) + m * d.query
    attention += FP32 * d.lse
    return attention, norm + m * d.hidden_full + 2 * m * d.ffn


def _cost(
    arch: Architecture,
    d: Dims,
    num: Numerics,
    *,
    saved: float,
    mlp_half: float,
    mlp_bw: float,
    core_bw: float,
    forward: float,
) -> LayerCost:
    # The norm backward works in fp32 rows: a few temporaries of the residual's size.
    norm_bw = (3 if arch.norm == "rms" else 2) * FP32 * d.hidden
    return LayerCost(
        saved=saved,
        mlp_saved=mlp_half,
        mlp_backward=max(mlp_bw, norm_bw),
        attention_backward=max(core_bw, norm_bw) + num.matmul * d.hidden_full,
        # Around either half: the norm's output the half reads; around the MLP's also
        # the residual sum (the attention half's residual is the layer input itself,
        # which the caller holds: LayerCost.input).
        forward_peak=forward + num.matmul * d.hidden_full,
        input=num.residual * d.hidden,
    )


def layer_cost(
    arch: Architecture, d: Dims, num: Numerics, step: Step, *, moe_layer: bool
) -> LayerCost:
    """The cost of one layer of ``arch``'s family."""
    if arch.family == "llama":
        return llama_layer(arch, d, num, step, moe_layer=moe_layer)
    return layernorm_layer(arch, d, num, step)


def adapter_dropout(
    arch: Architecture, d: Dims, num: Numerics, step: Step, *, first: bool
) -> tuple[float, float]:
    """What ``lora_dropout`` adds to a layer's saved tensors: (attention half, MLP half).

    PEFT computes ``lora_B(lora_A(dropout(x)))`` on the input ``x`` cast to the
    adapter's dtype (peft/tuners/lora/layer.py ``Linear.forward``, ``_cast_input_dtype``
    in tuners_utils.py): fp32 beside a half-precision base or under autocast, the
    base's dtype where the adapters compute in it (fp32 training, FSDP's bf16
    parameters). ``lora_A`` keeps the dropped tensor instead of ``x``, and dropout keeps
    its mask (1 byte per element on CUDA, the input's dtype on the CPU) where ``x``
    needs a gradient: in the model's ``first`` layer an input needs one only downstream
    of an adapter of that layer (embeddings and the frozen base pass none). Where ``x`` was a copy made for each adapter
    (PEFT's fp32 cast on a half-precision base; autocast's low-precision copy) the
    dropped tensor replaces it and only the mask is new. On an fp32 base the adapters
    of one input each keep a dropped copy, and ``x`` is freed unless another reader
    keeps it: the frozen base keeps no input, a fused attention kernel keeps its output
    (which is ``o_proj``'s input: the reshape is a view of its (batch, seq, heads)
    layout), the math path and eager attention hand over a copy.
    """
    t = step.trainable
    adapted = [
        module
        for name, module in linear_modules(arch).items()
        if module.per_layer and name in t.adapted and name != "experts"
    ]
    split = arch.num_heads / max(d.heads, 1)  # the tensor-parallel degree
    copies = t.upcast or num.amp
    dropped = FP32 if copies else num.matmul  # the adapters' dtype
    mask = dropped if num.cpu else num.dropout_mask
    attention_dropout = step.training and arch.attention_dropout > 0
    fused = not step.eager and not _math_fallback(
        arch, d, num, eager=step.eager, dropout=attention_dropout
    )
    halves = [0.0, 0.0]
    for stage in range(4):
        readers = [m for m in adapted if _stage(m) == stage]
        if not readers:
            continue
        # Row-parallel linears read a tensor-parallel split; the others, a whole one.
        widths = [m.inputs / split if m.inner else m.inputs for m in readers]
        if step.fused_qkv and not t.upcast:
            # Megatron's fused linear_qkv and linear_fc1: the adapters of one input are
            # one adapter (NeMo's ParallelLinearAdapter drops its input once).
            widths = [max(widths)]
        needs_grad = not first or any(_stage(m) < stage for m in adapted)
        kept = sum(widths) * (mask if needs_grad else 0.0)
        if not copies:
            kept += sum(widths) * dropped
            if not (stage == 1 and fused and arch.family != "neox"):
                kept -= max(widths) * dropped  # x, which only its adapters kept
        halves[stage // 2] += d.tokens * kept
    return halves[0], halves[1]


def _stage(module: Linear) -> int:
    """Where a linear reads in its layer: the attention half's norm (0), the attention
    output (1), the MLP half's norm (2), the MLP's hidden state (3)."""
    return (0 if module.attention else 2) + (1 if module.inner else 0)
