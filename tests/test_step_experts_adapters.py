"""The training step's MoE experts (timed at their own GEMM shapes, token permutations as
memory passes) and LoRA adapters (PEFT's extra narrow GEMMs and elementwise passes)."""

from typing import Any

import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.schema import Parallelism
from gpuplan.core.perf.efficiency import framework
from gpuplan.core.perf.flops import token_flops
from gpuplan.core.perf.step import (
    ADAPTER_INPUT_BYTES,
    ADAPTER_OUTPUT_BYTES,
    DROPOUT_INPUT_BYTES,
    adapter_work,
    expert_data_split,
    expert_gemm_groups,
    micro_batch,
    routed_traffic_bytes,
)
from gpuplan.core.perf.step_records import StepShape
from tests.helpers import bf16_rates

CATALOG = builtin_catalog()


def _moe(**changes: Any) -> StepShape:
    """Qwen3-30B-A3B's shape: 48 MoE layers, 128 experts of 768, 8 per token."""
    shape = StepShape(
        batch_size=1, seq=4096, accumulation=1, checkpointing="none", causal_skip=True,
        frozen_base=False, hidden_size=2048, mlp_width=8 * 768, kv_width=1024, num_layers=48,
        num_heads=32, head_dim=128, moe_layers=48, experts_per_token=8, experts=128,
        expert_width=768, dense_mlp_width=6144, activation_bytes=2,
        trainable_parameters=30_000_000_000, parameters=30_000_000_000, gradient_bytes=2,
        weight_bytes=2, gather_bytes=2, compile=False,
    )  # fmt: skip
    return msgspec.structs.replace(shape, **changes)


def _flops(groups: tuple[tuple[int, tuple[tuple[float, float, float], ...]], ...]) -> float:
    return sum(c * 2 * m * n * k for m, gemms in groups for c, n, k in gemms)


def test_experts_are_gemms_of_their_own_rows() -> None:
    tokens = 4096.0
    groups = expert_gemm_groups(_moe(), Parallelism(expert=8), tokens)
    (rows, _), (expert_rows, experts) = groups
    assert rows == 4096
    # tokens x top_k x EP / experts rows each, experts / EP of them a layer on a GPU
    assert expert_rows == 4096 * 8 * 8 // 128
    assert experts == ((48 * 16, 768.0, 2048.0), (48 * 16, 2048.0, 768.0))
    # the same FLOPs as the dense view of the active width
    dense = expert_gemm_groups(_moe(experts=0), Parallelism(expert=8), tokens)
    assert len(dense) == 1
    assert _flops(groups) == pytest.approx(_flops(dense))
    # without expert parallelism every expert is local and gets fewer rows
    (_, _), (alone, local) = expert_gemm_groups(_moe(), Parallelism(), tokens)
    assert alone == 4096 * 8 // 128
    assert local[0][0] == 48 * 128


def test_fine_grained_experts_are_slower_than_one_wide_gemm() -> None:
    t = token_flops(None, None, 3_000_000_000)
    rates = bf16_rates("h100-sxm5-80gb", "h100-sxm5-80gb")
    lay = Parallelism(expert=8)
    routed = micro_batch(t, _moe(), lay, rates, framework("megatron"))
    wide = micro_batch(t, _moe(experts=0), lay, rates, framework("megatron"))
    assert routed.measured
    assert wide.measured
    assert routed.model_flops == wide.model_flops
    assert routed.gemm_s > 1.2 * wide.gemm_s


def test_token_permutations_are_memory_passes() -> None:
    lay = Parallelism(expert=8)
    assert routed_traffic_bytes(_moe(experts=0), lay, 4096.0) == 0.0
    four = routed_traffic_bytes(_moe(), lay, 4096.0)
    # permute, sort by local expert, and their inverses: read and write, forward and backward
    assert four == 4096 * 8 * 48 * 2048 * 2 * 2 * 2 * 4
    # one expert per rank: no sort by local expert
    assert routed_traffic_bytes(_moe(experts=8), lay, 4096.0) == four / 2
    t = token_flops(None, None, 3_000_000_000)
    rates = bf16_rates("h100-sxm5-80gb", None)
    with_moves = micro_batch(t, _moe(), lay, rates, framework("megatron"))
    without = micro_batch(t, _moe(experts_per_token=0), lay, rates, framework("megatron"))
    assert with_moves.elementwise_s > without.elementwise_s


def _lora(**changes: Any) -> StepShape:
    shape = _moe(
        hidden_size=4096, mlp_width=14336, kv_width=1024, num_layers=32, moe_layers=0,
        experts_per_token=0, experts=0, expert_width=0, dense_mlp_width=0, frozen_base=True,
        batch_size=16, seq=2048,
        adapters=((1, 4096, 4096, False), (2, 4096, 1024, False), (1, 4096, 4096, True),
                  (2, 4096, 14336, False), (1, 14336, 4096, True)),
        adapter_rank=8, adapter_dropout=True,
    )  # fmt: skip
    return msgspec.structs.replace(shape, **changes)


@pytest.mark.parametrize("table", ["h100-sxm5-80gb", None])
def test_lora_adapters_cost_gemms_and_passes(table: str | None) -> None:
    rates = bf16_rates("h100-sxm5-80gb", table)
    lay = Parallelism()
    tokens = 16 * 2048.0
    assert adapter_work(_lora(adapters=()), lay, rates, tokens) == (0.0, 0.0)
    seconds, traffic = adapter_work(_lora(), lay, rates, tokens)
    inputs = 4096 * 6 + 14336
    outputs = 4096 * 2 + 1024 * 2 + 14336 * 2 + 4096
    per_input = ADAPTER_INPUT_BYTES + DROPOUT_INPUT_BYTES
    assert traffic == tokens * 32 * (inputs * per_input + outputs * ADAPTER_OUTPUT_BYTES)
    _, plain = adapter_work(_lora(adapter_dropout=False), lay, rates, tokens)
    assert plain == traffic - tokens * 32 * inputs * DROPOUT_INPUT_BYTES
    # rank-8 GEMMs run far below the peak: slower than their FLOPs at the dense rate
    flops = 6 * tokens * 32 * 8 * (inputs + outputs)
    assert seconds > 5 * flops / rates.peak_flops
    t = token_flops(None, None, 7_000_000_000)
    with_adapters = micro_batch(t, _lora(), lay, rates, framework("fsdp1"))
    bare = micro_batch(t, _lora(adapters=()), lay, rates, framework("fsdp1"))
    assert with_adapters.compute_s > bare.compute_s
    assert with_adapters.model_flops == bare.model_flops


def test_tensor_parallelism_splits_the_adapters() -> None:
    rates = bf16_rates("h100-sxm5-80gb", "h100-sxm5-80gb")
    tokens = 4096.0
    one = adapter_work(_lora(), Parallelism(), rates, tokens)
    two = adapter_work(_lora(), Parallelism(tensor=2), rates, tokens)
    assert two[0] < one[0]
    assert two[1] == pytest.approx(
        one[1]
        - tokens
        * 32
        * (
            (4096 + 14336) / 2 * (ADAPTER_INPUT_BYTES + DROPOUT_INPUT_BYTES)
            + (4096 + 2 * 1024 + 2 * 14336) / 2 * ADAPTER_OUTPUT_BYTES
        )
    )


def test_megatron_adapters_are_their_gemms_alone() -> None:
    rates = bf16_rates("h100-sxm5-80gb", "h100-sxm5-80gb")
    peft = adapter_work(_lora(), Parallelism(), rates, 4096.0)
    megatron = adapter_work(_lora(), Parallelism(), rates, 4096.0, peft=False)
    assert megatron == (peft[0], 0.0)


def test_adapters_wrapped_apart_pay_their_own_start_ups() -> None:
    from gpuplan.core.perf.link import Link
    from gpuplan.core.perf.step import training_step
    from gpuplan.core.perf.step_records import StepLinks

    net = Link(kind="network", bytes_per_s=50e9, latency_s=15e-6)
    nvlink = Link(kind="nvlink", bytes_per_s=450e9, latency_s=8e-6)
    t = token_flops(None, None, 7_000_000_000)
    base = _lora(
        flat_units=True, trainable_parameters=20_000_000, parameters=7_000_000_000,
        checkpointing="full", accumulation=4,
    )  # fmt: skip
    rates = bf16_rates("h100-sxm5-80gb", "h100-sxm5-80gb")

    def exposed(units: int, data: int) -> float:
        shape = msgspec.structs.replace(base, adapter_units=units)
        link = nvlink if data <= 8 else net
        links = StepLinks(
            tensor=link, context=link, expert=link, pipeline=link, data=link, host=link
        )
        return training_step(
            t, shape, Parallelism(data=data, zero_stage=3), rates=rates, links=links,
            framework=framework("fsdp1"),
        ).exposed_comm_s  # fmt: skip

    # 14 units a layer (7 adapted linears, lora_A and lora_B): 3 collectives each a
    # micro-batch, (k - 1) start-ups each; they hide behind compute at a few ranks
    assert exposed(14, 512) > exposed(0, 512) + 4 * 32 * 14 * 511 * 15e-6
    assert 0 < exposed(14, 8) - exposed(0, 8) < 0.02


def test_expert_gradients_reduce_over_the_ranks_holding_those_experts() -> None:
    shape = _moe(expert_parameters=48 * 128 * 3 * 2048 * 768)
    dense, experts, ranks = expert_data_split(shape, Parallelism(data=8, expert=8))
    assert experts == pytest.approx(48 * 16 * 3 * 2048 * 768)  # 1/EP of them on a GPU
    assert ranks == 1
    assert dense == 30_000_000_000 - 48 * 128 * 3 * 2048 * 768
    # without expert parallelism every parameter reduces over every data rank
    assert expert_data_split(shape, Parallelism(data=8)) == (30_000_000_000, 0.0, 8)
    _, _, four = expert_data_split(shape, Parallelism(data=32, expert=8))
    assert four == 4


def test_megatron_rank_order_puts_the_pipeline_outermost() -> None:
    """``tp-cp-ep-dp-pp`` (Megatron-core's default order): a data-parallel group stays
    inside one stage's tensor x context x data GPUs, a pipeline group strides the job."""
    from gpuplan.core.recommend.schema import ParallelLayout
    from gpuplan.core.recommend.training import _spans

    lay = ParallelLayout(tensor=2, pipeline=4, data=4, zero_stage=1, context=2)
    tensor, context, expert, pipeline, data = _spans(lay)
    assert (tensor, context, expert) == (2, 4, 4)
    assert data == 2 * 2 * 4  # one stage
    assert pipeline == 2 * 2 * 4 * 4  # the whole job
    flat = ParallelLayout(tensor=8, pipeline=1, data=16, zero_stage=1)
    assert _spans(flat)[3] == 8  # no pipeline group: no span beyond the tensor group
    assert _spans(flat)[4] == 128


def test_an_all_to_all_across_nodes_sends_its_node_peers_shares_over_nvlink() -> None:
    """NCCL runs the all-to-all as one group of sends, one per peer: a 16-rank group on
    two nodes of 8 sends half its bytes (the 8 shares of the other node) over the
    network while the 7 shares for its own node cross NVLink at the same time."""
    from gpuplan.core.perf.comm import all_gather_seconds, all_to_all_seconds
    from gpuplan.core.perf.link import Link

    net = Link(kind="network", bytes_per_s=50e9, latency_s=0.0)
    nvlink = Link(kind="nvlink", bytes_per_s=450e9, latency_s=0.0)
    nbytes = 1.6e9
    split = all_to_all_seconds(nbytes, 16, net, local=8, local_link=nvlink)
    assert split == pytest.approx(8 / 16 * nbytes / 50e9)
    assert split < all_gather_seconds(nbytes, 16, net)  # every share over the network
    # A slow domain link sets the time where its shares take longer.
    slow = Link(kind="nvlink", bytes_per_s=5e9, latency_s=0.0)
    assert all_to_all_seconds(nbytes, 16, net, local=8, local_link=slow) == pytest.approx(
        7 / 16 * nbytes / 5e9
    )
    # Without NVLink both sets leave through the GPU's PCIe link, the NICs' too: their sum.
    pcie = Link(kind="pcie", bytes_per_s=64e9, latency_s=0.0)
    assert all_to_all_seconds(nbytes, 16, net, local=8, local_link=pcie) == pytest.approx(
        15 / 16 * nbytes / 64e9
    )
    # Inside one domain it is the ring's (k-1)/k of the bytes, as before.
    assert all_to_all_seconds(nbytes, 8, nvlink, local=8, local_link=nvlink) == (
        all_gather_seconds(nbytes, 8, nvlink)
    )


def test_the_expert_group_knows_its_ranks_in_a_node() -> None:
    """The step's links count the expert group's ranks that share a GPU's node: EP 16
    on nodes of 8 H100 has 8; under TP 2 (ranks 2 GPUs apart) 4; inside a node every
    rank, over NVLink."""
    from gpuplan.core.recommend.schema import Constraints, ParallelLayout
    from gpuplan.core.recommend.training import _link_of, _spans, _step_links

    h100 = CATALOG.get("h100-sxm5-80gb")
    c = Constraints()

    def links(**layout: Any) -> Any:
        lay = ParallelLayout(pipeline=1, zero_stage=1, **layout)
        return _step_links(_spans(lay), lambda n: _link_of(h100, n, c))

    wide = links(tensor=1, data=16, expert=16)
    assert wide.expert.kind == "network"
    assert (wide.expert_local, wide.expert_local_link.kind) == (8, "nvlink")
    assert links(tensor=2, data=16, expert=16).expert_local == 4
    inside = links(tensor=1, data=8, expert=8)
    assert (inside.expert.kind, inside.expert_local) == ("nvlink", 8)
