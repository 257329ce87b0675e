"""The serving step's physical terms: the collective libraries' small-message all-reduce,
every matmul parameter timed from a measured kernel table, the wait for the step in
progress before a prompt is admitted, prefill batches run apart from decodes (SGLang
without mixed chunks), a scheduler in series with the GPU (SGLang before 0.4), a decode
step's weight read at the bandwidth the measured table's skinny GEMMs reach, a share of a
whole prompt's attention kernel in a step that carries less than a prompt."""

import math

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf.collectives import library_for, small_all_reduce_seconds
from gpuplan.core.perf.collectives_data import collective_libraries
from gpuplan.core.perf.comm import all_reduce_seconds
from gpuplan.core.perf.efficiency import efficiency_data, generation
from gpuplan.core.perf.flops import TokenFlops
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.serve import (
    Replica,
    measured_weight_read_seconds,
    prefill_apart,
    serve,
    step_seconds,
    time_to_first_token,
)
from gpuplan.core.perf.serve_shape import ServeShape
from gpuplan.core.perf.step_records import Rates
from gpuplan.core.recommend.engine import engine_spec, step_factor
from gpuplan.core.recommend.schema import Latency

NVLINK = Link(kind="nvlink", bytes_per_s=450e9, latency_s=8e-6)


def test_a_decode_all_reduce_costs_what_nccls_tuner_says() -> None:
    # 8 KB (one token's hidden state in 16 bits) over 8 GPUs: NCCL's ring LL, one
    # baseLat of 6.6 us and 2 x 7 NVLink hops of 0.6 us (src/graph/tuning.cc).
    small = small_all_reduce_seconds(8192, 8, NVLINK, "nccl")
    assert small == pytest.approx(6.6e-6 + 14 * 0.6e-6, rel=0.02)
    # The alpha-beta model's per-step start-up charges several times that.
    assert all_reduce_seconds(8192, 8, NVLINK) > 2.5 * small
    # More ranks, more hops.
    assert small_all_reduce_seconds(8192, 2, NVLINK, "nccl") < small


def test_rccl_starts_slower_than_nccl() -> None:
    nccl = small_all_reduce_seconds(8192, 8, NVLINK, "nccl")
    rccl = small_all_reduce_seconds(8192, 8, NVLINK, "rccl")
    assert rccl == pytest.approx(12.0e-6 + 14 * 0.8e-6, rel=0.02)
    assert rccl > nccl


def test_a_large_message_goes_at_the_bandwidth() -> None:
    # A long prompt's chunk: LL's quarter bandwidth loses to the simple protocol's.
    big = 256 * 2**20
    assert small_all_reduce_seconds(big, 8, NVLINK, "nccl") == pytest.approx(
        all_reduce_seconds(big, 8, NVLINK)
    )


def test_one_gpu_has_no_all_reduce() -> None:
    assert small_all_reduce_seconds(8192, 1, NVLINK, "nccl") == 0.0
    none = Link(kind="none", bytes_per_s=float("inf"), latency_s=0.0)
    assert small_all_reduce_seconds(8192, 4, none, "nccl") == 0.0


def test_the_all_reduce_of_a_kept_replica_is_the_formula_to_the_bit() -> None:
    # small_all_reduce precomputes what does not depend on the message: each figure must
    # be the LL ring's formula and comm.all_reduce_seconds', min of the two, exactly.
    pcie = Link(kind="pcie", bytes_per_s=32e9, latency_s=3e-6)
    for library in ("nccl", "rccl"):
        lib = collective_libraries()[library]
        for link in (NVLINK, pcie):
            for size in (2, 3, 4, 8):
                steps = 2 * (size - 1)
                bus = min(link.bytes_per_s * lib.ll_bandwidth_share, lib.ll_max_bus_bytes_per_s)
                for nbytes in (0.0, 1.0, 8192, 8192 * 37.5, 3e6, 256 * 2**20):
                    ll = (
                        lib.base_latency_seconds
                        + steps * lib.hop_latency_seconds[link.kind]
                        + steps / size * nbytes / bus
                    )
                    expected = min(ll, all_reduce_seconds(nbytes, size, link))
                    assert small_all_reduce_seconds(nbytes, size, link, library) == expected


def test_amd_gpus_run_rccl() -> None:
    assert library_for("amd") == "rccl"
    assert library_for("nvidia") == "nccl"
    for lib in collective_libraries().values():
        assert "tuning.cc" in lib.source


def _replica(
    gpu_id: str,
    tp: int,
    *,
    table: bool,
    collectives: str = "nccl",
    share: float | None = None,
    mbu: float = 0.8,
    mbu_given: bool = False,
) -> Replica:
    gpu = builtin_catalog().get(gpu_id)
    data = efficiency_data()
    kernels = data.kernels
    if share is not None:
        kernels = msgspec.structs.replace(kernels, measured_kernel_share=share)
    rates = Rates(
        peak_flops=float(gpu.peak_flops["bf16"]),
        attention_peak_flops=float(gpu.peak_flops["bf16"]),
        bandwidth_bytes_per_s=float(gpu.memory_bandwidth_bytes_per_s),
        generation=generation(gpu),
        kernels=kernels,
        kernel_table=gpu_id if table else None,
    )
    return Replica(
        tp=tp,
        rates=rates,
        mbu=mbu,
        link=NVLINK if tp > 1 else Link(kind="none", bytes_per_s=float("inf"), latency_s=0.0),
        collectives=collectives,  # type: ignore[arg-type]
        mbu_given=mbu_given,
    )


# Llama 3.1 8B's shape (hidden 4096, SwiGLU width 14336, GQA 8 x 128).
SHAPE = ServeShape(
    prompt_tokens=512,
    output_tokens=128,
    hidden_size=4096,
    mlp_width=14336,
    num_layers=32,
    activation_bytes=2,
    causal_skip=True,
    weights_bytes=16e9,
    kv_bytes_per_token=131072,
    token_budget=8192,
    num_heads=32,
    kv_width=1024,
    head_dim=128,
    vocab_size=128256,
    kv_cache_16bit=True,
)


def test_measured_gemms_count_every_matmul_parameter() -> None:
    # The table's shapes list one MLP up-projection; the gate's FLOPs are the model's all
    # the same: a step's GEMM time follows the model's matmul parameters.
    r = _replica("h100-sxm5-80gb", 1, table=True)
    gated = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    ungated = TokenFlops(matmul_parameters=5_700_000_000, attention_per_context_token=0.0)
    prefill_gated, _ = step_seconds(gated, SHAPE, r, decode=0, prompt=8192)
    prefill_ungated, _ = step_seconds(ungated, SHAPE, r, decode=0, prompt=8192)
    assert prefill_gated > 1.2 * prefill_ungated


def test_rccl_makes_a_tensor_parallel_decode_step_slower() -> None:
    t = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    nccl, _ = step_seconds(t, SHAPE, _replica("h100-sxm5-80gb", 8, table=False), decode=1, prompt=0)
    rccl, _ = step_seconds(
        t, SHAPE, _replica("h100-sxm5-80gb", 8, table=False, collectives="rccl"), decode=1, prompt=0
    )
    # Two all-reduces per layer, each about 8.6 us slower.
    assert rccl - nccl == pytest.approx(32 * 2 * (23.2e-6 - 15.0e-6), rel=0.05)


def test_an_arriving_prompt_waits_for_the_step_in_progress() -> None:
    t = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    r = _replica("h100-sxm5-80gb", 1, table=True)
    alone = time_to_first_token(t, SHAPE, r, 1)
    prefill_alone, _ = step_seconds(t, SHAPE, r, decode=0, prompt=512)
    # Nothing else in flight: the prompt's own step.
    assert alone == pytest.approx(prefill_alone)
    busy = time_to_first_token(t, SHAPE, r, 16)
    steady, _ = step_seconds(t, SHAPE, r, decode=15, prompt=15 * 512 / 128)
    chunk, _ = step_seconds(t, SHAPE, r, decode=15, prompt=512)
    # Beside 15 decoding sequences: half the step in progress, then its own step.
    assert busy == pytest.approx(steady / 2 + chunk)


def test_the_kernel_share_slows_arithmetic_not_weight_reads() -> None:
    # The measured share (clocks under sustained load) halved: a prefill of 8,192 tokens,
    # tensor-core bound, takes much longer; a batch-1 decode step, which reads the
    # weights and the KV cache, hardly changes.
    t = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    full = _replica("h100-sxm5-80gb", 1, table=True, share=1.0)
    half = _replica("h100-sxm5-80gb", 1, table=True, share=0.5)
    prefill_full, _ = step_seconds(t, SHAPE, full, decode=0, prompt=8192)
    prefill_half, _ = step_seconds(t, SHAPE, half, decode=0, prompt=8192)
    assert prefill_half > 1.5 * prefill_full
    decode_full, _ = step_seconds(t, SHAPE, full, decode=1, prompt=0)
    decode_half, _ = step_seconds(t, SHAPE, half, decode=1, prompt=0)
    assert decode_half < 1.05 * decode_full


def test_prefill_batches_apart_from_decodes_stall_every_sequence() -> None:
    # SGLang without --enable-mixed-chunk: 32 sequences of 128 output tokens; a quarter
    # of a request arrives per decode step, so a prefill batch follows a decode step with
    # probability 1 - exp(-1/4), and each sequence waits for it.
    t = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    r = _replica("h100-sxm5-80gb", 1, table=True)
    decode, prefill, per_decode, _ = prefill_apart(t, SHAPE, r, decode=32, prompt=32 * 512 / 128)
    assert per_decode == pytest.approx(1 - math.exp(-32 / 128))
    alone, _ = step_seconds(t, SHAPE, r, decode=32, prompt=0)
    assert decode == pytest.approx(alone)
    # The batch carries the arrivals' prompts: B·s/o tokens over the chance it runs.
    expected, _ = step_seconds(t, SHAPE, r, decode=0, prompt=32 * 512 / 128 / per_decode)
    assert prefill == pytest.approx(expected)
    apart = serve(t, SHAPE, r, 32, mixed=False)
    assert apart.time_per_output_token_s == pytest.approx(decode + per_decode * prefill)
    assert apart.output_tokens_per_s == pytest.approx(32 / apart.time_per_output_token_s)
    # Mixed chunks ride in the memory-bound decode step: a shorter time per token.
    assert serve(t, SHAPE, r, 32).time_per_output_token_s < apart.time_per_output_token_s


def test_a_prompt_of_an_apart_engine_waits_only_for_its_prefill_batch() -> None:
    # Alone, a prompt runs at once in its own prefill batch; beside others it first waits
    # out the step in progress (decode or prefill, found in proportion to its length).
    t = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    r = _replica("h100-sxm5-80gb", 1, table=True)
    own, _ = step_seconds(t, SHAPE, r, decode=0, prompt=512 * (1 + 1 / 128))
    assert serve(t, SHAPE, r, 1, mixed=False).time_to_first_token_s == pytest.approx(own)
    decode, prefill, p, _ = prefill_apart(t, SHAPE, r, decode=32, prompt=32 * 512 / 128)
    busy = serve(t, SHAPE, r, 32, mixed=False).time_to_first_token_s
    mine, _ = step_seconds(t, SHAPE, r, decode=0, prompt=512 * (1 + 32 / 128))
    residual = (decode**2 + p * prefill**2) / (2 * (decode + p * prefill))
    assert busy == pytest.approx(residual + mine)


def _sglang_8b_on_one_h100(**inference: object) -> Latency:
    """The top plan's latency for Llama 3.1 8B on SGLang on one H100, 1,024-token
    prompts and 128 output tokens, with ``inference``'s other fields."""
    from gpuplan.core.recommend import RecommendRequest, recommend

    body = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 1024},
        "inference": {"engine": "sglang", "output_tokens": 128, **inference},
        "constraints": {"include": ["h100-sxm5-80gb"], "gpu_counts": [1]},
    }
    answer = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
    latency = answer.recommendations[0].latency
    assert latency is not None
    return latency


def test_the_queue_of_an_apart_engine_waits_for_its_prefill_batches() -> None:
    # The same SGLang replica under the same load and SLO: with prompts in batches of
    # their own, every sequence waits for them, so fewer requests/s keep the p95s.
    def within(mixed: bool) -> float:
        latency = _sglang_8b_on_one_h100(
            mixed_chunk=mixed,
            requests_per_second=5,
            slo={"ttft_p95_s": 2.0, "tpot_p95_s": 0.05},
        )
        assert latency.max_requests_per_s_within_slo is not None
        return latency.max_requests_per_s_within_slo

    assert within(False) < within(True)


def test_sglang_before_0_4_schedules_each_step_in_series() -> None:
    # The SGLang v0.4 release measured its overlapped scheduler 1.1x faster than 0.3's.
    sglang = engine_spec("sglang")
    assert step_factor(sglang, "0.3.0") == pytest.approx(1.1)
    assert step_factor(sglang, "0.3.6.post1") == pytest.approx(1.1)
    assert step_factor(sglang, "0.4.0") == 1.0
    assert step_factor(sglang, "0.5.23") == 1.0
    assert step_factor(sglang, None) == 1.0  # the source's version overlaps
    assert step_factor(engine_spec("vllm"), "0.3.0") == 1.0
    assert "1.1x" in (sglang.serial_step_source or "")


def test_a_serial_scheduler_lengthens_every_step_and_the_plan() -> None:
    t = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)
    r = _replica("h100-sxm5-80gb", 1, table=True)
    base, _ = step_seconds(t, SHAPE, r, decode=32, prompt=128)
    slow, _ = step_seconds(t, SHAPE, r._replace(serial=1.1), decode=32, prompt=128)
    assert slow == pytest.approx(1.1 * base)

    def tpot(version: str | None) -> float:
        given = {} if version is None else {"engine_version": version}
        return _sglang_8b_on_one_h100(max_concurrency=16, **given).time_per_output_token_s

    assert tpot("0.3.0") == pytest.approx(1.1 * tpot(None))
    assert tpot("0.4.0") == pytest.approx(tpot(None))


T8B = TokenFlops(matmul_parameters=7_500_000_000, attention_per_context_token=0.0)


def test_a_measured_table_times_the_decode_weight_read_not_the_fitted_mbu() -> None:
    # Where a table covers the GPU, a batch-1 decode step reads its weights at the share
    # of the bandwidth the table's m = 1 GEMMs reach, whatever the generation's mbu.
    slow = _replica("a100-sxm4-80gb", 1, table=True, mbu=0.3)
    fast = _replica("a100-sxm4-80gb", 1, table=True, mbu=0.9)
    one_slow, _ = step_seconds(T8B, SHAPE, slow, decode=1, prompt=0)
    one_fast, _ = step_seconds(T8B, SHAPE, fast, decode=1, prompt=0)
    assert one_slow == pytest.approx(one_fast)
    read = measured_weight_read_seconds(SHAPE, fast)
    bandwidth = fast.rates.bandwidth_bytes_per_s
    embedding = SHAPE.vocab_size * SHAPE.hidden_size * 2
    share = (SHAPE.weights_bytes - embedding) / bandwidth / read
    assert 0.65 < share < 0.8  # AIConfigurator's A100 GEMMs at m = 1: about 0.73
    # Without a table the fitted mbu times it.
    roofline_slow, _ = step_seconds(
        T8B, SHAPE, _replica("a100-sxm4-80gb", 1, table=False, mbu=0.3), decode=1, prompt=0
    )
    assert roofline_slow > 2 * one_fast


def test_a_requests_own_mbu_still_times_the_weight_read() -> None:
    given = _replica("a100-sxm4-80gb", 1, table=True, mbu=0.3, mbu_given=True)
    one, _ = step_seconds(T8B, SHAPE, given, decode=1, prompt=0)
    assert one > SHAPE.weights_bytes / (given.rates.bandwidth_bytes_per_s * 0.3)


def test_the_weight_read_leaves_the_input_embedding_out_and_keeps_touched_experts() -> None:
    r = _replica("h100-sxm5-80gb", 1, table=True)
    read = measured_weight_read_seconds(SHAPE, r)
    # An MoE step that touches more experts reads more bytes, in proportion.
    embedding = SHAPE.vocab_size * SHAPE.hidden_size * 2
    more = msgspec.structs.replace(SHAPE, weights_bytes=2 * SHAPE.weights_bytes - embedding)
    assert measured_weight_read_seconds(more, r) == pytest.approx(2 * read)
    # The input embedding's rows are not read whole: a larger vocabulary at the same
    # weights reads less.
    wider = msgspec.structs.replace(SHAPE, vocab_size=2 * SHAPE.vocab_size)
    assert measured_weight_read_seconds(wider, r) < read


def test_a_step_carrying_part_of_a_prompt_carries_that_share_of_its_attention() -> None:
    # A step carries a sixteenth, then an eighth of a 512-token prompt on average (a
    # steady state of few arrivals): its prompt attention is that share of one whole
    # prompt's kernel from the table, linear in the share, not the kernel's floor at a
    # fraction of a prompt. The table's part is the step less the same step untimed by
    # it (head_dim 0; the model's own attention FLOPs are 0 here).
    r = _replica("h100-sxm5-80gb", 1, table=True)
    untimed = msgspec.structs.replace(SHAPE, head_dim=0)

    def attention(prompt: float) -> float:
        return (
            step_seconds(T8B, SHAPE, r, decode=0, prompt=prompt)[0]
            - step_seconds(T8B, untimed, r, decode=0, prompt=prompt)[0]
        )

    whole = attention(512)
    assert whole > 0
    assert attention(32) == pytest.approx(whole / 16, rel=1e-9)
    assert attention(64) == pytest.approx(whole / 8, rel=1e-9)
