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

from gpuplan.core.perf.collectives import small_all_reduce
from gpuplan.core.perf.collectives_data import Library
from gpuplan.core.perf.flops import TokenFlops, forward_flops_per_token
from gpuplan.core.perf.kernels import (
    Gemm,
    context_attention_seconds,
    gemm_rate,
    generation_attention_seconds,
    kernel_tables,
    model_gemms,
)
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.serve_shape import ServeShape
from gpuplan.core.perf.step import eager_layer_bytes, wide_gemm_efficiency
from gpuplan.core.perf.step_records import Rates

Bound = Literal["memory", "compute"]


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
    kernels are fused as serving engines fuse them (forward only). :class:`Stepper` of
    the replica, for one step (a caller that times many steps of one replica keeps the
    stepper)."""
    return Stepper(t, shape, r)(decode, prompt)


class Stepper:
    """:func:`step_seconds` of one model on one replica, as a function of the step's
    decodes and prompt tokens. What does not depend on them (the weight read, the
    attention FLOPs per prompt token, the rates' denominators, the all-reduce's
    start-up) is computed once: a serving search times hundreds of steps of each
    replica. Each step is computed in :func:`step_seconds`'s operations, in their order
    (a factor is taken out only where it comes first), so every figure is the same to
    the bit."""

    _rates: dict[int, float]
    """The measured table's GEMM rate by a step's rows."""

    _decodes: dict[int, float]
    """The measured table's decode attention of one layer by a step's decodes."""

    def __init__(self, t: TokenFlops, shape: ServeShape, r: Replica) -> None:
        rates, tp, k = r.rates, r.tp, r.rates.kernels
        self.shape, self.r = shape, r
        self._steps: dict[tuple[int, float], tuple[float, Bound]] = {}
        self.tp = tp
        self.s = s = shape.prompt_tokens
        self.context = s + shape.output_tokens / 2
        self.bandwidth = bandwidth = rates.bandwidth_bytes_per_s * r.mbu
        self.weights = shape.weights_bytes / bandwidth
        self.kv_bytes = shape.kv_bytes_per_token
        self.budget = shape.token_budget
        self.two_n = 2 * t.matmul_parameters
        self.attention_per_prompt = (
            forward_flops_per_token(t, s, causal_skip=shape.causal_skip) - 2 * t.matmul_parameters
        )
        self.mfu_rate = rates.peak_flops * rates.mfu if rates.mfu is not None else None
        self.peak = rates.peak_flops
        if rates.mfu is None:
            gen = rates.generation
            # gemm_efficiency's factors: the width's here, the step's rows' in __call__.
            self.plateau_wide = wide_gemm_efficiency(rates, shape.hidden_size / tp)
            self.half_tokens = k.gemm_half_tokens
            self.attention_rate = rates.attention_peak_flops * gen.attention_efficiency
            # An eager layer's counted bytes, forward only (a third), left after the
            # engine's fused kernels as torch.compile leaves them.
            self.layer_bytes = eager_layer_bytes(
                shape.hidden_size, shape.kv_width, shape.mlp_width, k
            )
            self.elementwise_factor = k.compile_elementwise_factor / 3
            self.activation_factor = shape.activation_bytes / 2
            self.elementwise_rate = rates.bandwidth_bytes_per_s * gen.bandwidth_efficiency
        self.layers = shape.num_layers
        self.launches = shape.num_layers * k.decode_overhead_seconds
        self.layer_overhead = k.layer_overhead_seconds
        self.compile_factor = k.compile_elementwise_factor
        self.message_bytes = shape.hidden_size
        self.activation_bytes = shape.activation_bytes
        self.comm_count = shape.num_layers * 2
        self.reduce = small_all_reduce(tp, r.link, r.collectives)
        self.serial = r.serial
        self.measured = rates.kernel_source == "measured" and shape.hidden_size > 0
        if self.measured:
            table = rates.kernel_table
            assert table is not None
            self.table = table
            self.dtype = "fp8" if rates.fp8 else "bf16"
            self.gemms = _gemms(shape, r)
            self._rates, self._decodes = {}, {}
            self.share = rates.kernels.measured_kernel_share
            measured = kernel_tables()[table]
            timed_heads = shape.head_dim > 0 and shape.num_heads > 0
            self.heads = max(shape.num_heads / tp, 1.0) if timed_heads else 0.0
            self.kv_heads = max(shape.kv_width / shape.head_dim / tp, 1.0) if timed_heads else 0.0
            self.head_dim = float(shape.head_dim)
            self.decode_table = (
                timed_heads and shape.kv_cache_16bit and measured.generation_attention is not None
            )
            self.prompt_table = (
                timed_heads
                and s > 0
                and shape.causal_skip
                and measured.context_attention is not None
            )
            if not r.mbu_given:
                self.weights_measured = measured_weight_read_seconds(shape, r)

    def __call__(self, decode: int, prompt: float) -> tuple[float, Bound]:
        """The step of ``decode`` decodes and ``prompt`` prompt tokens (memoized: a
        search asks for some steps more than once, e.g. the concurrency's bisection
        probes a time per output token that the plan it settles on times again)."""
        key = (decode, prompt)
        hit = self._steps.get(key)
        if hit is None:
            hit = self._steps[key] = self._step(decode, prompt)
        return hit

    def _step(self, decode: int, prompt: float) -> tuple[float, Bound]:
        tp, s = self.tp, self.s
        weights = self.weights
        kv = decode * self.kv_bytes * self.context / self.bandwidth
        # The steps that carry a prompt carry a chunk of it (at most the budget beside the
        # decodes): their GEMMs have that many rows and more.
        # max(prompt, min(s, max(budget - decode, 1))), in conditionals that pick as the
        # builtins do (a step is timed hundreds of times a search).
        if prompt > 0:
            room = self.budget - decode
            room = 1 if room < 1 else room
            room = room if room < s else s
            chunk = room if room > prompt else prompt
        else:
            chunk = 0.0
        gemm_flops = self.two_n * (decode + prompt) / tp
        prompt_attention = self.attention_per_prompt * prompt / tp
        if self.mfu_rate is not None:
            gemm = gemm_flops / self.mfu_rate
            attention = prompt_attention / self.mfu_rate
            elementwise = 0.0
        else:
            # Rows of a skinny decode-only GEMM leave tensor cores idle, but the weight reads
            # bound that step anyway: its FLOPs are timed at the wide plateau.
            if prompt > 0:
                rows = chunk + decode
                efficiency = self.plateau_wide * (rows / (rows + self.half_tokens))
            else:
                efficiency = self.plateau_wide
            gemm = gemm_flops / (self.peak * efficiency)
            attention = prompt_attention / self.attention_rate
            traffic = (decode + prompt) * self.layers * self.layer_bytes / tp
            traffic *= self.elementwise_factor
            traffic *= self.activation_factor
            elementwise = traffic / self.elementwise_rate
        launches = self.launches
        if prompt > 0:
            share = prompt / chunk
            launches += (
                (share if share < 1.0 else 1.0)  # min(1.0, share)
                * self.layers
                * self.layer_overhead
                / 3
                * self.compile_factor
            )
        message = (decode + prompt) * self.message_bytes * self.activation_bytes
        comm = self.comm_count * self.reduce(message)
        bound: Bound = "memory" if weights + kv >= gemm + attention else "compute"
        if self.measured:
            gemm, kv, attention = self._measured(
                decode,
                rows=chunk + decode if prompt > 0 else decode,
                prompt=prompt,
                roofline=(kv, attention),
                gemm_flops=gemm_flops,
            )
            if not self.r.mbu_given:
                weights = self.weights_measured
        slowest = gemm if gemm > weights else weights  # max(weights, gemm)
        seconds = slowest + kv + attention + elementwise + launches + comm
        return seconds * self.serial, bound

    def _measured(
        self,
        decode: int,
        *,
        rows: float,
        prompt: float,
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
        table, share = self.table, self.share
        kv, attention = roofline
        s = self.s
        # The table's look-ups by the step's rows and decodes, kept by the stepper (the
        # shared caches would hash the replica's GEMM shapes on every step).
        m = round(rows)
        m = 1 if m < 1 else m  # max(round(rows), 1)
        rate = self._rates.get(m)
        if rate is None:
            rate = self._rates[m] = gemm_rate(table, self.dtype, m, self.gemms, 0)
        gemm = _share_slowed(gemm_flops / rate, rate, self.peak, share)
        if decode > 0 and self.decode_table:
            one = self._decodes.get(decode)
            if one is None:
                one = self._decodes[decode] = generation_attention_seconds(
                    table, float(decode), self.context, self.kv_heads, self.head_dim
                )
            kv = self.layers * one  # KV reads: memory-bound, no share
        if prompt > 0 and self.prompt_table:
            # Fewer than a whole prompt per step on average (a steady state of few
            # arrivals): a whole prompt's kernel runs in one step of several, so a step
            # carries its share of that kernel, not the kernel's floor at a fraction of
            # a prompt (below the table's smallest batch the time stays).
            prompts = prompt / s
            whole = max(prompts, 1.0)
            one = context_attention_seconds(table, whole, float(s), self.heads, self.head_dim)
            attention = self.layers * one * prompts / whole / share
        return gemm, kv, attention


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


def prefill_apart(
    t: TokenFlops,
    shape: ServeShape,
    r: Replica,
    *,
    decode: int,
    prompt: float,
    stepper: Stepper | None = None,
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
    timed = stepper or Stepper(t, shape, r)
    step, bound = timed(decode, 0)
    prefill = 0.0
    if per_decode > 0:
        prefill, _ = timed(0, prompt / per_decode)
    return step, prefill, per_decode, bound


def apart_step_seconds(
    t: TokenFlops,
    shape: ServeShape,
    r: Replica,
    *,
    decode: int,
    prompt: float,
    stepper: Stepper | None = None,
) -> float:
    """The mean time between one decode step and the next when prompts run apart
    (:func:`prefill_apart`): a decode step and the prefill batches that come between.
    ``stepper``: the replica's :class:`Stepper`, when the caller keeps one."""
    step, prefill, per_decode, _ = prefill_apart(
        t, shape, r, decode=decode, prompt=prompt, stepper=stepper
    )
    return step + per_decode * prefill


def time_to_first_token(
    t: TokenFlops, shape: ServeShape, r: Replica, batch: int, stepper: Stepper | None = None
) -> float:
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
    timed = stepper or Stepper(t, shape, r)
    step, _ = timed(others, prompt)
    in_progress = 0.0
    if others > 0:
        in_progress, _ = timed(others, others * s / o)
    return in_progress / 2 + chunks * step


def serve(
    t: TokenFlops,
    shape: ServeShape,
    r: Replica,
    batch: int,
    *,
    static: bool = False,
    mixed: bool = True,
    stepper: Stepper | None = None,
) -> Served:
    """One replica serving ``batch`` sequences at once, in steady state.

    ``static``: the whole batch starts together (a static batch, as FasterTransformer or
    DeepSpeed-Inference run it): one prefill of every prompt, then ``o`` decode steps
    with nothing beside them, and the batch's time over its tokens.

    ``mixed``: prompt chunks ride in the decode steps (chunked prefill mixed with
    decodes); else prompts run in prefill batches of their own between decode steps
    (:func:`prefill_apart`), and a new prompt, which the scheduler admits first, waits
    for the step in progress and then its own prefill batch.
    ``stepper``: the replica's :class:`Stepper`, when the caller keeps one.
    """
    timed = stepper or Stepper(t, shape, r)
    o = max(shape.output_tokens, 1)
    s = shape.prompt_tokens
    if static:
        prefill, _ = timed(0, batch * s)
        step, bound = timed(batch, 0)
        ttft, tpot = prefill, step
        tokens_per_s = batch * o / (prefill + (o - 1) * step)
    elif not mixed:
        decode, prefill, per_decode, bound = prefill_apart(
            t, shape, r, decode=batch, prompt=batch * s / o, stepper=timed
        )
        step = decode + per_decode * prefill
        # The step in progress at a random moment: decode and prefill steps, each
        # found in proportion to its length (residual life E[T²] / 2E[T]); then the
        # prompt's own prefill batch, with the others that arrived (Poisson) beside it.
        in_progress = (decode**2 + per_decode * prefill**2) / (2 * step)
        own, _ = timed(0, s * (1 + batch / o))
        ttft = (in_progress if batch > 1 else 0.0) + own
        tpot = step
        tokens_per_s = batch / step
    else:
        step, bound = timed(batch, batch * s / o)
        ttft, tpot = time_to_first_token(t, shape, r, batch, timed), step
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
