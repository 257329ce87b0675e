"""How fast one replica serves, the way continuous-batching servers serve.

A server (vLLM, TGI, TensorRT-LLM, SGLang) keeps up to ``B`` sequences in flight. Every
engine step decodes one token for each of them and fits prompt tokens of newly arrived
requests beside them (chunked prefill), up to a token budget per step. One step on a
replica of ``tp`` GPUs therefore:

- reads every local weight once, and each decoding sequence's KV cache at its mean
  context (prompt + half the output), at the bandwidth x MBU;
- computes the decode tokens and the step's prompt tokens through the model's kernels
  (GEMMs at the efficiency of their width, attention over the context, the memory-bound
  kernels, fused as serving engines fuse them);
- takes the larger of the two (the roofline: batching amortizes the weight reads until
  compute takes over), plus a host and launch cost per layer and the tensor-parallel
  all-reduces of the step's tokens.

In steady state ``B / o`` requests finish per step and as many start, so a step carries
``B · s / o`` prompt tokens on average: the time per output token (TPOT) is that step,
the throughput ``B / TPOT``. A new request's prompt goes through in chunks of the budget
left beside the decodes; its time to first token (TTFT) is those steps (queueing aside).
The concurrency ``B`` is chosen by :mod:`gpuplan.core.recommend.serving`.
"""

import math
from functools import lru_cache
from typing import Literal, NamedTuple

from gpuplan.core.perf.collectives import Library, small_all_reduce_seconds
from gpuplan.core.perf.comm import Link
from gpuplan.core.perf.flops import TokenFlops, forward_flops_per_token
from gpuplan.core.perf.kernels import (
    Gemm,
    context_attention_seconds,
    gemm_rate,
    generation_attention_seconds,
    kernel_tables,
    model_gemms,
)
from gpuplan.core.perf.step import Rates, gemm_efficiency
from gpuplan.core.record import Record

Bound = Literal["memory", "compute"]


class ServeShape(Record, kw_only=True):
    """What of the model and its requests a replica's speed depends on."""

    prompt_tokens: int
    output_tokens: int
    hidden_size: int
    mlp_width: int
    num_layers: int
    activation_bytes: int
    causal_skip: bool
    """The prefill's attention skips the causal mask's blocks (a fused kernel; see
    :attr:`gpuplan.core.perf.step.StepShape.causal_skip`)."""

    weights_bytes: float
    """Weights one GPU of the replica reads each step."""

    kv_bytes_per_token: float
    """KV cache one GPU holds per token of one sequence."""

    token_budget: int
    """Tokens one engine step takes at most, decodes and prompt chunks together
    (vLLM's ``max_num_batched_tokens``)."""

    num_heads: int = 0
    kv_width: int = 0
    """Key (or value) width per token: KV heads x head size."""

    head_dim: int = 0
    """0: attention is not timed from a measured table (MLA, an unknown model)."""

    vocab_size: int = 0
    kv_cache_16bit: bool = False
    """The KV cache is held in 16 bits, as the measured decode attention read it."""


class Replica(NamedTuple):
    """The GPUs of one replica: how many (tensor parallel), what they deliver, how linked."""

    tp: int
    rates: Rates
    mbu: float
    """Share of the bandwidth a step's reads reach."""

    link: Link
    collectives: Library = "nccl"
    """The library whose all-reduce the engine's tensor parallelism runs (RCCL on AMD)."""

    serial: float = 1.0
    """A step's time over its GPU time: above 1 where the engine's host schedules each
    step in series with the GPU instead of one step ahead (SGLang before 0.4)."""

    mbu_given: bool = False
    """``mbu`` is the request's own: it times the weight reads even where a measured
    kernel table covers the GPU (:func:`measured_weight_read_seconds`)."""


class Served(NamedTuple):
    """One replica at concurrency ``batch``, in steady state."""

    batch: int
    step_s: float
    bound: Bound
    time_to_first_token_s: float
    time_per_output_token_s: float
    output_tokens_per_s: float
    requests_per_s: float
    model_flops_per_s: float


def step_seconds(
    t: TokenFlops, shape: ServeShape, r: Replica, *, decode: int, prompt: float
) -> tuple[float, Bound]:
    """One engine step: a token for each of ``decode`` sequences and ``prompt`` prompt
    tokens beside them (``prompt`` may be an average over steps).

    The GEMMs take the step's decode and prompt rows together, so they last as long as
    the larger of reading the weights and their FLOPs; attention runs apart, reading each
    decoding sequence's KV cache and computing the prompt tokens' scores; the memory-bound
    kernels are fused as serving engines fuse them (forward only).
    """
    rates, tp, k = r.rates, r.tp, r.rates.kernels
    s = shape.prompt_tokens
    context = s + shape.output_tokens / 2
    bandwidth = rates.bandwidth_bytes_per_s * r.mbu
    weights = shape.weights_bytes / bandwidth
    kv = decode * shape.kv_bytes_per_token * context / bandwidth
    # The steps that carry a prompt carry a chunk of it (at most the budget beside the
    # decodes): their GEMMs have that many rows and more.
    chunk = max(prompt, min(s, max(shape.token_budget - decode, 1))) if prompt > 0 else 0.0
    gemm_flops = 2 * t.matmul_parameters * (decode + prompt) / tp
    prompt_attention = (
        (forward_flops_per_token(t, s, causal_skip=shape.causal_skip) - 2 * t.matmul_parameters)
        * prompt
        / tp
    )
    if rates.mfu is not None:
        gemm = gemm_flops / (rates.peak_flops * rates.mfu)
        attention = prompt_attention / (rates.peak_flops * rates.mfu)
        elementwise = 0.0
    else:
        gen = rates.generation
        width = shape.hidden_size / tp
        # Rows of a skinny decode-only GEMM leave tensor cores idle, but the weight reads
        # bound that step anyway: its FLOPs are timed at the wide plateau.
        rows = chunk + decode if prompt > 0 else math.inf
        gemm = gemm_flops / (rates.peak_flops * gemm_efficiency(rates, width, rows))
        attention = prompt_attention / (rates.attention_peak_flops * gen.attention_efficiency)
        traffic = (decode + prompt) * shape.num_layers * (shape.hidden_size + shape.mlp_width) / tp
        traffic *= k.elementwise_bytes_per_hidden / 3 * k.compile_elementwise_factor
        traffic *= shape.activation_bytes / 2
        elementwise = traffic / (rates.bandwidth_bytes_per_s * gen.bandwidth_efficiency)
    launches = shape.num_layers * k.decode_overhead_seconds
    if prompt > 0:
        launches += (
            min(1.0, prompt / chunk)
            * shape.num_layers
            * k.layer_overhead_seconds
            / 3
            * k.compile_elementwise_factor
        )
    message = (decode + prompt) * shape.hidden_size * shape.activation_bytes
    comm = shape.num_layers * 2 * small_all_reduce_seconds(message, tp, r.link, r.collectives)
    bound: Bound = "memory" if weights + kv >= gemm + attention else "compute"
    if rates.kernel_source == "measured" and shape.hidden_size > 0:
        gemm, kv, attention = _measured(
            shape,
            r,
            decode=decode,
            rows=chunk + decode if prompt > 0 else decode,
            prompt=prompt,
            context=context,
            roofline=(kv, attention),
            gemm_flops=gemm_flops,
        )
        if not r.mbu_given:
            weights = measured_weight_read_seconds(shape, r)
    seconds = max(weights, gemm) + kv + attention + elementwise + launches + comm
    return seconds * r.serial, bound


def measured_weight_read_seconds(shape: ServeShape, r: Replica) -> float:
    """A decode step's weight read as the measured table times it. The model's GEMMs at
    ``m = 1`` read each weight once, so their measured time is their weights' bytes over
    the bandwidth they stream at (AIConfigurator's tables, 16-bit Llama 7B to 70B
    shapes: 0.72 to 0.74 of the A100's datasheet bandwidth, 0.75 to 0.79 of the H100's).
    Where a table covers the GPU the read is timed at that share, not at the
    generation's fitted ``decode_bandwidth_efficiency`` (kept for the GPUs no table
    covers and for a request's own ``mbu``). The bytes are the replica's weights less
    the input embedding, whose step reads one row per token (an MoE's: the experts the
    step touches), and at least the listed GEMMs' own (``model_gemms`` leaves a gated
    MLP's gate out, so a SwiGLU model's weights are the more)."""
    parameters, one_row = _one_row(shape, r)
    element_bytes = 1 if r.rates.fp8 else 2
    embedding = shape.vocab_size * shape.hidden_size * element_bytes / r.tp
    read = max(parameters * element_bytes, shape.weights_bytes - embedding)
    return one_row * read / (parameters * element_bytes)


def _one_row(shape: ServeShape, r: Replica) -> tuple[float, float]:
    """The listed GEMMs' parameters and their time at ``m = 1``."""
    rates = r.rates
    assert rates.kernel_table is not None
    return _one_row_of(
        rates.kernel_table,
        fp8=rates.fp8,
        peak_flops=rates.peak_flops,
        share=rates.kernels.measured_kernel_share,
        gemms=_gemms(shape, r),
    )


def _gemms(shape: ServeShape, r: Replica) -> tuple[Gemm, ...]:
    """The model's GEMMs on one GPU of the replica (:func:`model_gemms`)."""
    return model_gemms(
        hidden=shape.hidden_size,
        kv_width=shape.kv_width,
        mlp_width=shape.mlp_width,
        vocab=shape.vocab_size,
        tensor=r.tp,
        layers=shape.num_layers,
    )


@lru_cache(maxsize=4096)
def _one_row_of(
    table: str, *, fp8: bool, peak_flops: float, share: float, gemms: tuple[Gemm, ...]
) -> tuple[float, float]:
    """:func:`_one_row` from plain values (memoized: a search asks for the same
    replica's at every step it times)."""
    parameters = sum(c * n * k for c, n, k in gemms)
    rate = gemm_rate(table, "fp8" if fp8 else "bf16", 1, gemms, 0)
    return parameters, _share_slowed(2 * parameters / rate, rate, peak_flops, share)


def _share_slowed(seconds: float, rate: float, peak_flops: float, share: float) -> float:
    """An isolated kernel's ``seconds`` at ``rate``, its tensor-core-bound part slowed by
    ``measured_kernel_share`` (see :func:`_measured`)."""
    # The share slows what the tensor cores bound (clocks under sustained load), not the
    # weight reads of a skinny GEMM: of the isolated kernel's time, ``rate / peak`` is
    # arithmetic at the peak, the rest the memory's.
    tensor_bound = min(rate / peak_flops, 1.0)
    return seconds * (1 + tensor_bound * (1 / share - 1))


def _measured_gemm_seconds(
    shape: ServeShape, r: Replica, *, rows: float, gemm_flops: float
) -> float:
    """``gemm_flops`` of the model's GEMMs over ``rows`` rows at the measured table's
    rate, the tensor-core-bound share of it slowed by ``measured_kernel_share`` (see
    :func:`_measured`)."""
    rates = r.rates
    table = rates.kernel_table
    assert table is not None
    gemms = _gemms(shape, r)
    rate = gemm_rate(table, "fp8" if rates.fp8 else "bf16", max(round(rows), 1), gemms, 0)
    share = rates.kernels.measured_kernel_share
    return _share_slowed(gemm_flops / rate, rate, rates.peak_flops, share)


def _measured(
    shape: ServeShape,
    r: Replica,
    *,
    decode: int,
    rows: float,
    prompt: float,
    context: float,
    roofline: tuple[float, float],
    gemm_flops: float,
) -> tuple[float, float, float]:
    """(GEMMs, decode attention, prompt attention) of one engine step from the measured
    kernel table: the GEMMs over the step's rows (forward only; a skinny decode GEMM's
    measured time is its weight reads, so the weights still bound it), each decoding
    sequence's attention over its mean context from the generation table (where the KV
    cache is 16-bit, as measured), the prompt tokens' causal attention from the prefill
    table as their share of whole prompts. The GEMMs' FLOPs are the model's
    (``gemm_flops``: every matmul parameter, a gated MLP's gate and an MoE's experts
    included) at the rate the table gives the typical shapes over the step's rows, as
    the training step times them (``step._measured_gemm_rate``):
    :func:`gpuplan.core.perf.kernels.model_gemms` lists one MLP up-projection of the MLP
    width, so its shapes' own FLOPs would leave a SwiGLU gate out (a quarter of a
    Llama's matmuls). Each at the share of the isolated kernels'
    speed a real step realizes (``kernels.measured_kernel_share``, fitted with the
    training runs) where the tensor cores bound it: the share stands for the clocks of
    a sustained load, which slow arithmetic and leave the memory's bandwidth as it is,
    so a GEMM's isolated time is split by its rate (``rate / peak`` of it at the
    tensor-core roofline, slowed by the share; the rest reading memory, not), and the
    decode attention, which streams each sequence's KV cache once, keeps the measured
    time. The launches, host work and gaps between kernels are timed apart
    (``decode_overhead_seconds``, ``layer_overhead_seconds``). ``roofline``: the decode and prompt attention of the roofline model,
    kept where the table cannot time them."""
    rates, tp = r.rates, r.tp
    table = rates.kernel_table
    assert table is not None
    share = rates.kernels.measured_kernel_share
    kv, attention = roofline
    s = shape.prompt_tokens
    gemm = _measured_gemm_seconds(shape, r, rows=rows, gemm_flops=gemm_flops)
    measured = kernel_tables()[table]
    if shape.head_dim > 0 and shape.num_heads > 0:
        heads = max(shape.num_heads / tp, 1.0)
        kv_heads = max(shape.kv_width / shape.head_dim / tp, 1.0)
        if decode > 0 and shape.kv_cache_16bit and measured.generation_attention is not None:
            one = generation_attention_seconds(
                table, float(decode), context, kv_heads, float(shape.head_dim)
            )
            kv = shape.num_layers * one  # KV reads: memory-bound, no share
        if prompt > 0 and s > 0 and shape.causal_skip and measured.context_attention is not None:
            # Fewer than a whole prompt per step on average (a steady state of few
            # arrivals): a whole prompt's kernel runs in one step of several, so a step
            # carries its share of that kernel, not the kernel's floor at a fraction of
            # a prompt (below the table's smallest batch the time stays).
            prompts = prompt / s
            whole = max(prompts, 1.0)
            one = context_attention_seconds(table, whole, float(s), heads, float(shape.head_dim))
            attention = shape.num_layers * one * prompts / whole / share
    return gemm, kv, attention


def prefill_apart(
    t: TokenFlops, shape: ServeShape, r: Replica, *, decode: int, prompt: float
) -> tuple[float, float, float, Bound]:
    """(decode step, prefill step, prefill steps per decode step, bound) of an engine
    that runs prompts in prefill batches of their own, never beside decodes, for
    ``decode`` sequences in flight and ``prompt`` prompt tokens arriving per decode step
    on average: SGLang without ``--enable-mixed-chunk`` (``ServerArgs.enable_mixed_chunk:
    bool = False``; the flag's help: "Enabling mixing prefill and decode in a batch when
    using chunked prefill."). Its scheduler (``ModelTpServer.forward_step`` of the 0.3
    line) asks for a new prefill batch before each decode round and, when requests wait,
    runs one of all of them (up to the chunk) first; a streaming request's output ends
    the round after one decode step, so the check comes between decode steps.

    Requests arrive at random moments, ``prompt / s`` of them per decode step, so a
    decode step is followed by a prefill batch when at least one arrived during it:
    with probability ``1 - exp(-prompt / s)`` (Poisson). That batch carries the
    arrivals' prompts, ``prompt`` tokens over that probability, at one weight read of its
    own (and no decode beside it). Every sequence in flight waits for it: the time per
    output token is a decode step plus the prefill steps per decode step times a prefill
    step. In steady state ``prompt = B · s / o``."""
    arrivals = prompt / max(shape.prompt_tokens, 1)
    per_decode = -math.expm1(-arrivals)
    step, bound = step_seconds(t, shape, r, decode=decode, prompt=0)
    prefill = 0.0
    if per_decode > 0:
        prefill, _ = step_seconds(t, shape, r, decode=0, prompt=prompt / per_decode)
    return step, prefill, per_decode, bound


def apart_step_seconds(
    t: TokenFlops, shape: ServeShape, r: Replica, *, decode: int, prompt: float
) -> float:
    """The mean time between one decode step and the next when prompts run apart
    (:func:`prefill_apart`): a decode step and the prefill batches that come between."""
    step, prefill, per_decode, _ = prefill_apart(t, shape, r, decode=decode, prompt=prompt)
    return step + per_decode * prefill


def time_to_first_token(t: TokenFlops, shape: ServeShape, r: Replica, batch: int) -> float:
    """A new prompt in chunks of the budget left beside the decodes, one step each; in
    steady state each of those steps also carries the other arrivals' prompt tokens, and
    the first token comes at the end of the last.

    Before its first chunk the prompt waits for the step in progress: an engine admits
    new requests only between steps (vLLM's and SGLang's loops schedule, run the step,
    then take what arrived meanwhile), and a request arriving at a random moment of a
    step of length ``T`` finds ``T / 2`` of it left on average (the residual life of
    equal steps; the queueing model's ``residual``, ``core/perf/queueing.py``). With no
    other sequence in flight the engine is idle and the prompt starts at once."""
    s, o = shape.prompt_tokens, max(shape.output_tokens, 1)
    others = max(batch - 1, 0)
    room = max(shape.token_budget - others, 1)
    chunks = math.ceil(s / room)
    prompt = max(s / chunks, others * s / o)
    step, _ = step_seconds(t, shape, r, decode=others, prompt=prompt)
    in_progress = 0.0
    if others > 0:
        in_progress, _ = step_seconds(t, shape, r, decode=others, prompt=others * s / o)
    return in_progress / 2 + chunks * step


def serve(
    t: TokenFlops,
    shape: ServeShape,
    r: Replica,
    batch: int,
    *,
    static: bool = False,
    mixed: bool = True,
) -> Served:
    """One replica serving ``batch`` sequences at once, in steady state.

    ``static``: the whole batch starts together (a static batch, as FasterTransformer or
    DeepSpeed-Inference run it): one prefill of every prompt, then ``o`` decode steps
    with nothing beside them, and the batch's time over its tokens.

    ``mixed``: prompt chunks ride in the decode steps (chunked prefill mixed with
    decodes); else prompts run in prefill batches of their own between decode steps
    (:func:`prefill_apart`), and a new prompt, which the scheduler admits first, waits
    for the step in progress and then its own prefill batch.
    """
    o = max(shape.output_tokens, 1)
    s = shape.prompt_tokens
    if static:
        prefill, _ = step_seconds(t, shape, r, decode=0, prompt=batch * s)
        step, bound = step_seconds(t, shape, r, decode=batch, prompt=0)
        ttft, tpot = prefill, step
        tokens_per_s = batch * o / (prefill + (o - 1) * step)
    elif not mixed:
        decode, prefill, per_decode, bound = prefill_apart(
            t, shape, r, decode=batch, prompt=batch * s / o
        )
        step = decode + per_decode * prefill
        # The step in progress at a random moment: decode and prefill steps, each
        # found in proportion to its length (residual life E[T²] / 2E[T]); then the
        # prompt's own prefill batch, with the others that arrived (Poisson) beside it.
        in_progress = (decode**2 + per_decode * prefill**2) / (2 * step)
        own, _ = step_seconds(t, shape, r, decode=0, prompt=s * (1 + batch / o))
        ttft = (in_progress if batch > 1 else 0.0) + own
        tpot = step
        tokens_per_s = batch / step
    else:
        step, bound = step_seconds(t, shape, r, decode=batch, prompt=batch * s / o)
        ttft, tpot = time_to_first_token(t, shape, r, batch), step
        tokens_per_s = batch / step
    requests = tokens_per_s / o
    flops_per_request = s * forward_flops_per_token(
        t, s, causal_skip=shape.causal_skip
    ) + o * forward_flops_per_token(t, s + o / 2, causal_skip=False)
    return Served(
        batch=batch,
        step_s=step,
        bound=bound,
        time_to_first_token_s=ttft,
        time_per_output_token_s=tpot,
        output_tokens_per_s=tokens_per_s,
        requests_per_s=requests,
        model_flops_per_s=requests * flops_per_request,
    )


def budget_concurrency(shape: ServeShape) -> int:
    """The most sequences whose steady-state decodes and prompt chunks fit the budget:
    ``B · (1 + s / o) ≤ budget``."""
    o = max(shape.output_tokens, 1)
    return max(int(shape.token_budget / (1 + shape.prompt_tokens / o)), 1)
