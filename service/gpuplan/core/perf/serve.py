"""How fast one replica serves, the way continuous-batching servers serve.

A server (vLLM, TGI, TensorRT-LLM, SGLang) keeps up to ``B`` sequences in flight: every
engine step decodes one token for each of them and fits the prefill of newly arrived
requests in beside (chunked prefill). So, per replica of ``tp`` GPUs:

- a decode step reads every local weight once and each sequence's KV cache, so it
  takes ``max(bytes / (bandwidth x MBU), FLOPs / (peak x GEMM efficiency))`` plus a
  launch cost per layer and the tensor-parallel all-reduces: batching amortizes the
  weight reads until compute takes over (the roofline's ridge);
- a prefill of ``s`` prompt tokens is compute-bound like a training forward (or, for a
  short prompt, bound by reading the weights once);
- in steady state ``B / o`` new requests start each step (``o`` output tokens each),
  so a step also carries their prefill: time per output token
  ``TPOT = decode(B) + prefill · B / o``, throughput ``B / TPOT`` tokens/s, and a request
  waits its own prefill plus a step for its first token (TTFT).

The concurrency ``B`` is chosen by :mod:`gpuplan.core.recommend.serving` from the KV
cache that fits and the latency targets.
"""

from typing import Literal, NamedTuple

from gpuplan.core.perf.comm import Link, all_reduce_seconds
from gpuplan.core.perf.flops import TokenFlops, forward_flops_per_token
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
    weights_bytes: float
    """Weights one GPU of the replica reads each decode step."""

    kv_bytes_per_token: float
    """KV cache one GPU holds per token of one sequence."""


class Replica(NamedTuple):
    """The GPUs of one replica: how many (tensor parallel), what they deliver, how linked."""

    tp: int
    rates: Rates
    mbu: float
    """Share of the bandwidth a decode step's reads reach."""

    link: Link


class Served(NamedTuple):
    """One replica at concurrency ``batch``."""

    batch: int
    prefill_s: float
    decode_step_s: float
    decode_bound: Bound
    time_to_first_token_s: float
    time_per_output_token_s: float
    output_tokens_per_s: float
    requests_per_s: float
    model_flops_per_s: float


def prefill_seconds(t: TokenFlops, shape: ServeShape, r: Replica) -> float:
    """One request's prompt through the replica: a training forward's kernels."""
    tp, rates, link = r.tp, r.rates, r.link
    s = shape.prompt_tokens
    gemm_flops = 2 * t.matmul_parameters * s / tp
    attention_flops = (
        (forward_flops_per_token(t, s, causal_skip=shape.causal_skip) - 2 * t.matmul_parameters)
        * s
        / tp
    )
    if rates.mfu is not None:
        compute = (gemm_flops + attention_flops) / (rates.peak_flops * rates.mfu)
    else:
        k, gen = rates.kernels, rates.generation
        gemm = gemm_flops / (rates.peak_flops * gemm_efficiency(rates, shape.hidden_size / tp))
        attention = attention_flops / (rates.attention_peak_flops * gen.attention_efficiency)
        # Serving engines run fused kernels (as torch.compile would): forward only.
        traffic = s * shape.num_layers * (shape.hidden_size + shape.mlp_width) / tp
        traffic *= k.elementwise_bytes_per_hidden / 3 * k.compile_elementwise_factor
        traffic *= shape.activation_bytes / 2
        elementwise = traffic / (rates.bandwidth_bytes_per_s * gen.bandwidth_efficiency)
        launch = shape.num_layers * k.layer_overhead_seconds / 3 * k.compile_elementwise_factor
        compute = gemm + attention + elementwise + launch
    reads = shape.weights_bytes / (
        rates.bandwidth_bytes_per_s * rates.generation.bandwidth_efficiency
    )
    message = s * shape.hidden_size * shape.activation_bytes
    return max(compute, reads) + shape.num_layers * 2 * all_reduce_seconds(message, tp, link)


def decode_seconds(t: TokenFlops, shape: ServeShape, r: Replica, batch: int) -> tuple[float, Bound]:
    """One engine step: a token for each of ``batch`` sequences at the mean context."""
    tp, rates, mbu, link = r
    context = shape.prompt_tokens + shape.output_tokens / 2
    read = shape.weights_bytes + batch * shape.kv_bytes_per_token * context
    memory = read / (rates.bandwidth_bytes_per_s * mbu)
    flops = batch * forward_flops_per_token(t, context, causal_skip=False) / tp
    efficiency = (
        rates.mfu if rates.mfu is not None else gemm_efficiency(rates, shape.hidden_size / tp)
    )
    compute = flops / (rates.peak_flops * efficiency)
    message = batch * shape.hidden_size * shape.activation_bytes
    extra = shape.num_layers * (
        rates.kernels.decode_overhead_seconds + 2 * all_reduce_seconds(message, tp, link)
    )
    return max(memory, compute) + extra, "memory" if memory >= compute else "compute"


def serve(t: TokenFlops, shape: ServeShape, r: Replica, batch: int) -> Served:
    """One replica serving ``batch`` sequences at once, in steady state."""
    o = max(shape.output_tokens, 1)
    prefill = prefill_seconds(t, shape, r)
    step, bound = decode_seconds(t, shape, r, batch)
    tpot = step + prefill * batch / o
    tokens_per_s = batch / tpot
    s = shape.prompt_tokens
    flops_per_request = s * forward_flops_per_token(
        t, s, causal_skip=shape.causal_skip
    ) + o * forward_flops_per_token(t, s + o / 2, causal_skip=False)
    requests = tokens_per_s / o
    return Served(
        batch=batch,
        prefill_s=prefill,
        decode_step_s=step,
        decode_bound=bound,
        time_to_first_token_s=prefill + step,
        time_per_output_token_s=tpot,
        output_tokens_per_s=tokens_per_s,
        requests_per_s=requests,
        model_flops_per_s=requests * flops_per_request,
    )
