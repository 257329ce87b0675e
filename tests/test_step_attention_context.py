"""The training step's context-parallel key/value exchange (only the tensor-parallel
rank's heads), the pipeline's last stage (which holds the output head), the loss's
memory passes over the logits, the fused attention's backward and FlashAttention-2 on
Hopper."""

from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.schema import Parallelism
from gpuplan.core.perf.efficiency import framework
from gpuplan.core.perf.flash_attention import flash2_tables, parse
from gpuplan.core.perf.flops import TokenFlops
from gpuplan.core.perf.kernels import context_attention_seconds
from gpuplan.core.perf.link import Link
from gpuplan.core.perf.step import (
    FUSED_ATTENTION_BACKWARD_OVER_FORWARD,
    LOSS_BYTES_PER_LOGIT,
    _micro_comm,
    context_kv_width,
    last_stage_parameters,
    micro_batch,
)
from gpuplan.core.perf.step_records import StepLinks, StepShape
from tests.helpers import bf16_rates

CATALOG = builtin_catalog()
NETWORK = Link(kind="network", bytes_per_s=50e9, latency_s=0.0)
LINKS = StepLinks(
    tensor=NETWORK, context=NETWORK, expert=NETWORK, pipeline=NETWORK, data=NETWORK, host=NETWORK
)


LLAMA2_7B = TokenFlops(matmul_parameters=6_500_000_000, attention_per_context_token=4 * 4096 * 32)


def _llama2_7b(**changes: Any) -> StepShape:
    """Llama 2 7B: 32 layers of 4096, 32 heads of 128 (no grouped keys)."""
    shape = StepShape(
        batch_size=1, seq=32768, accumulation=1, checkpointing="none", causal_skip=True,
        frozen_base=False, hidden_size=4096, mlp_width=11008, kv_width=4096, num_layers=32,
        num_heads=32, head_dim=128, moe_layers=0, experts_per_token=0, activation_bytes=2,
        trainable_parameters=6_700_000_000, parameters=6_700_000_000, gradient_bytes=2,
        weight_bytes=2, gather_bytes=2, compile=False,
    )  # fmt: skip
    return msgspec.structs.replace(shape, **changes)


def test_context_parallel_moves_only_the_tensor_ranks_heads() -> None:
    shape = _llama2_7b(seq=524288)
    assert context_kv_width(shape, Parallelism(context=16)) == 4096
    assert context_kv_width(shape, Parallelism(tensor=8, context=16)) == 512
    # never less than one head: 8 grouped key/value heads over 16 tensor ranks
    assert context_kv_width(_llama2_7b(kv_width=1024), Parallelism(tensor=16)) == 128
    # the exposed exchange (nothing to hide behind) shrinks with the heads a GPU holds
    alone = _micro_comm(shape, Parallelism(context=16), LINKS, 0.0)[1]
    split = _micro_comm(shape, Parallelism(tensor=8, context=16), LINKS, 0.0)[1]
    assert split == pytest.approx(alone / 8, rel=1e-3)


def test_the_last_pipeline_stage_holds_the_whole_head() -> None:
    head = 32000 * 4096
    shape = _llama2_7b(vocab_size=32000)
    n = LLAMA2_7B.matmul_parameters
    assert last_stage_parameters(LLAMA2_7B, shape, Parallelism()) == n
    assert last_stage_parameters(LLAMA2_7B, shape, Parallelism(pipeline=4)) == (n - head) / 4 + head
    # an unknown head: the layers alone, split evenly
    assert last_stage_parameters(LLAMA2_7B, _llama2_7b(), Parallelism(pipeline=4)) == n / 4
    rates = bf16_rates("h100-sxm5-80gb", None)
    one = micro_batch(LLAMA2_7B, shape, Parallelism(), rates, framework("megatron"))
    four = micro_batch(LLAMA2_7B, shape, Parallelism(pipeline=4), rates, framework("megatron"))
    # the model FLOPs split evenly; the time is the last stage's, head and all (its
    # GEMMs at their shapes' rates, within a fraction of a percent of the whole model's)
    assert four.model_flops == pytest.approx(one.model_flops / 4)
    assert four.gemm_s / one.gemm_s == pytest.approx(((n - head) / 4 + head) / n, rel=2e-3)
    assert four.gemm_s > one.gemm_s / 4


def test_the_loss_reads_and_writes_every_logit() -> None:
    rates = bf16_rates("h100-sxm5-80gb", None)
    lay = Parallelism(tensor=2)
    bare = micro_batch(LLAMA2_7B, _llama2_7b(), lay, rates, framework("ddp"))
    head = micro_batch(LLAMA2_7B, _llama2_7b(vocab_size=32000), lay, rates, framework("ddp"))
    # eager PyTorch: the fp32 cast, log_softmax and their backward over 16k logits a GPU
    assert LOSS_BYTES_PER_LOGIT == 48
    logits = 32768 * 32000 / 2
    speed = rates.bandwidth_bytes_per_s * rates.generation.bandwidth_efficiency
    assert head.elementwise_s - bare.elementwise_s == pytest.approx(logits * 48 / speed)
    # a fused loss (Megatron) and a compiled one move less, as their other kernels do
    fused = micro_batch(LLAMA2_7B, _llama2_7b(vocab_size=32000), lay, rates, framework("megatron"))
    fused_bare = micro_batch(LLAMA2_7B, _llama2_7b(), lay, rates, framework("megatron"))
    assert fused.elementwise_s - fused_bare.elementwise_s < 0.5 * (
        head.elementwise_s - bare.elementwise_s
    )


def test_a_fused_attention_backward_takes_three_forwards() -> None:
    """The measured prefill table times the forward; the backward recomputes the scores
    and runs slower per FLOP: about three forwards (cuDNN's measured training SDPA on
    H200), not the model FLOPs' two."""
    assert FUSED_ATTENTION_BACKWARD_OVER_FORWARD == 3.0
    rates = bf16_rates("h100-sxm5-80gb", "h100-sxm5-80gb")
    shape = _llama2_7b(seq=16384)
    lay = Parallelism(tensor=2)
    micro = micro_batch(LLAMA2_7B, shape, lay, rates, framework("megatron"))
    forward = context_attention_seconds("h100-sxm5-80gb", 1.0, 16384.0, 16.0, 128.0)
    share = rates.kernels.measured_kernel_share
    assert micro.attention_s == pytest.approx(4 * 32 * forward / share)
    # context parallelism splits the same work
    cp = micro_batch(
        LLAMA2_7B, shape, Parallelism(tensor=2, context=2), rates, framework("megatron")
    )
    assert cp.attention_s == pytest.approx(micro.attention_s / 2)
    # the forward is a quarter of it: what a full or selective recompute repeats
    assert micro.attention_forward_share == pytest.approx(1 / 4)
    assert micro.recompute_s("selective") == pytest.approx(micro.attention_s / 4)
    # eager attention keeps the model FLOPs' split (forward 1, backward 2)
    eager = micro_batch(LLAMA2_7B, _llama2_7b(causal_skip=False), lay, rates, framework("ddp"))
    assert eager.attention_forward_share == pytest.approx(1 / 3)


def test_flash_attention_2_on_hopper_runs_at_its_measured_rate() -> None:
    """``attention: flash`` (FlashAttention-2: the flash-attn 2 package, or SDPA's flash
    backend before torch 2.11) runs on Hopper at its measured rate, 314 TFLOP/s forward
    and 249 backward at 4K keys (NVIDIA/cudnn-frontend's SDPA benchmark), slower than the
    measured prefill table; other GPUs, and ``sdpa``, keep the table."""
    h100 = bf16_rates("h100-sxm5-80gb", "h100-sxm5-80gb")
    shape = _llama2_7b(seq=4096, batch_size=2)
    lay = Parallelism()
    table = micro_batch(LLAMA2_7B, shape, lay, h100, framework("fsdp1"))
    flash = micro_batch(LLAMA2_7B, _llama2_7b(seq=4096, batch_size=2, flash2=True), lay, h100,
                        framework("fsdp1"))  # fmt: skip
    forward_flops = 2 * 2 * 2 * 4096**2 * 128 * 32 / 2
    first = flash2_tables()["hopper"].rows[0]
    seq, forward_rate, backward_rate = first.keys, first.forward_tflops, first.backward_tflops
    assert seq == 4096
    forward = forward_flops / (forward_rate * 1e12)
    backward = 2.5 * forward_flops / (backward_rate * 1e12)
    share = h100.kernels.measured_kernel_share
    assert flash.attention_s == pytest.approx(32 * (forward + backward) / share)
    assert flash.attention_forward_share == pytest.approx(forward / (forward + backward))
    assert flash.attention_s > 1.3 * table.attention_s
    assert flash.gemm_s == table.gemm_s
    assert flash.elementwise_s == table.elementwise_s
    # shorter sequences are clamped to the 4K row, context parallelism splits the work
    short = _llama2_7b(seq=2048, batch_size=4, flash2=True)
    assert micro_batch(LLAMA2_7B, short, lay, h100, framework("fsdp1")).attention_s == (
        pytest.approx(flash.attention_s / 2)
    )
    cp = micro_batch(LLAMA2_7B, _llama2_7b(seq=4096, batch_size=2, flash2=True),
                     Parallelism(context=2), h100, framework("fsdp1"))  # fmt: skip
    assert cp.attention_s == pytest.approx(flash.attention_s / 2)
    # an A100 keeps its measured table
    a100 = bf16_rates("a100-sxm4-80gb", "a100-sxm4-80gb")
    assert micro_batch(
        LLAMA2_7B, _llama2_7b(seq=4096, batch_size=2, flash2=True), lay, a100, framework("fsdp1")
    ).attention_s == pytest.approx(
        micro_batch(LLAMA2_7B, shape, lay, a100, framework("fsdp1")).attention_s
    )


def _flash_toml(rows: str, backward: str = "2.5", generation: str = "hopper") -> str:
    return f"""
[[table]]
kernel = "flash-attention-2"
generation = "{generation}"
dtype = "bf16"
causal = true
head_dim = 128
flops = "count"
backward_flops_over_forward = {backward}
source = "test"
rows = [{rows}]
"""


def test_flash_attention_table_interpolates_between_measured_rows() -> None:
    """Log-linear in the keys between rows, clamped outside them: the shipped table's
    rows come back exactly, 6K lies between 4K's and 8K's rates."""
    table = flash2_tables()["hopper"]
    for row in table.rows:
        assert table.rates(row.keys) == (row.forward_tflops, row.backward_tflops)
    lo, hi = table.rows[0], table.rows[1]
    mid_forward, mid_backward = table.rates((lo.keys * hi.keys) ** 0.5)
    assert mid_forward == pytest.approx((lo.forward_tflops + hi.forward_tflops) / 2)
    assert mid_backward == pytest.approx((lo.backward_tflops + hi.backward_tflops) / 2)
    assert table.rates(512) == table.rates(lo.keys)
    assert table.rates(10**7) == table.rates(table.rows[-1].keys)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _flash_toml(
                "{ keys = 8192, forward_tflops = 1.0, backward_tflops = 1.0 },"
                "{ keys = 4096, forward_tflops = 1.0, backward_tflops = 1.0 }"
            ),
            "ascend",
        ),
        (_flash_toml("{ keys = 4096, forward_tflops = 0.0, backward_tflops = 1.0 }"), "positive"),
        (_flash_toml(""), "no rows"),
        (
            _flash_toml("{ keys = 4096, forward_tflops = 1.0, backward_tflops = 1.0 }", "0"),
            "backward",
        ),
        (
            _flash_toml("{ keys = 4096, forward_tflops = 1.0, backward_tflops = 1.0 }") * 2,
            "two tables",
        ),
    ],
)
def test_flash_attention_table_is_validated_at_load(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse(text)


def test_flash_attention_table_rejects_a_missing_field() -> None:
    text = _flash_toml("{ keys = 4096, forward_tflops = 1.0 }")
    with pytest.raises(msgspec.ValidationError, match="backward_tflops"):
        parse(text)
