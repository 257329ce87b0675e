"""One real FSDP1 training step on the CPU, as rank 0 of ``case.data`` ranks sees it.

PyTorch's ``FullyShardedDataParallel`` (FSDP1, flat parameters) runs on the CPU. The case
builds the model, wraps it as the front ends do (one FSDP unit per decoder layer, the
rest in the root unit: accelerate's ``transformer_based_wrap`` and Lightning's
``auto_wrap_policy={Block}``; with PEFT adapters either PEFT's ``fsdp_auto_wrap_policy``,
which wraps each trainable leaf on its own, as transformers' ``update_fsdp_plugin_peft``
does, or the adapters left inside their layer's unit), and takes two optimizer steps
under the profiler of ``bench/accuracy/measure.py``; the measured window is the second.

The process group is PyTorch's fake one (``torch.testing._internal.distributed.fake_pg``,
torch 2.13.0): rank 0 of ``case.data`` ranks in this one process, whose collectives
return at once without moving data. Every tensor FSDP1 allocates and frees (shards,
gathered units, flat gradients, reduce-scatter inputs and outputs) is allocated and
freed as with real ranks, in program order, which is what
``torch.cuda.max_memory_allocated`` counts on a GPU (the caching allocator updates its
allocated bytes when a block is freed, whatever stream still uses it); the gathered
values are not the other ranks', which a memory measure does not read. Real gloo ranks
were tried first and read high: gloo's CPU reduce-scatter and all-gather allocate a
full-size internal copy (NCCL does not), and its worker threads free tensors where the
profiler does not record the free, so up to two units' bytes per step read as alive.
"""

from typing import Any

import torch

from bench.accuracy.cases import Case
from bench.accuracy.measure import Measured, measure_training

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def _mixed_precision(case: Case) -> Any:
    """``MixedPrecision`` as accelerate (amp: param, reduce and buffer dtype the half
    precision) and Lightning (``bf16-mixed``: fp32 parameters, a bf16 reduce) set it."""
    from torch.distributed.fsdp import MixedPrecision

    if not case.precision.startswith("amp_"):
        return None
    half = torch.bfloat16
    param = DTYPES[case.param_dtype] if case.param_dtype else half
    return MixedPrecision(param_dtype=param, reduce_dtype=half, buffer_dtype=half)


def wrap(case: Case, model: Any) -> Any:
    """``model`` under FSDP1 with ``case``'s settings, on this CPU."""
    from torch.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    inner = model.base_model.model if case.mode == "finetune_lora" else model
    layer_names = set(inner._no_split_modules or [])
    layers = {type(m) for m in model.modules() if type(m).__name__ in layer_names}
    if case.mode == "finetune_lora" and case.adapters == "wrapped_separately":
        from peft.utils.other import fsdp_auto_wrap_policy

        policy: Any = fsdp_auto_wrap_policy(model)  # type: ignore[no-untyped-call]
    else:
        policy = ModuleWrapPolicy(layers)
    prefetch = {
        "backward_pre": BackwardPrefetch.BACKWARD_PRE,
        "backward_post": BackwardPrefetch.BACKWARD_POST,
        "none": None,
    }[case.backward_prefetch]
    return FSDP(
        model,
        auto_wrap_policy=policy,
        device_id=torch.device("cpu"),
        mixed_precision=_mixed_precision(case),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        backward_prefetch=prefetch,
        use_orig_params=case.use_orig_params,
        limit_all_gathers=True,
    )


def measure_fsdp1(case: Case) -> Measured:
    """Rank 0's peak of the second step of ``case`` under FSDP1 over ``case.data`` ranks."""
    import torch.distributed as dist

    from bench.accuracy.run import batch_for, model_for, optimizer_for
    from gpuplan.trace.fsdp import fake_process_group

    build, hf = model_for(case)
    # The tracer's group, when a trace ran first in this process, is reused or replaced.
    fake_process_group(case.data)
    try:
        # Accelerate also runs the forward under autocast; with bf16 gathered
        # parameters it casts nothing more.
        autocast = torch.bfloat16 if case.precision.startswith("amp_") else None
        return measure_training(
            lambda: wrap(case, build()),
            lambda: batch_for(case, hf),
            optimizer_for(case),
            accumulation=case.accumulation,
            autocast=autocast,
            no_sync=case.no_sync and case.accumulation > 1,
        )
    finally:
        dist.destroy_process_group()
