"""The estimator against the four measured rows of Megatron-LM's memory tool README.

    PYTHONPATH=service:. python -m bench.accuracy.megatron_tool

NVIDIA/Megatron-LM tools/get_training_info/README.md (commit 9771366, 2023-09-02) lists
Llama 2 7B on H800s at four layouts, "the output of torch.cuda.max_memory_allocated()
in Megatron's report_memory after training several iterations", with ``--bf16
--use-flash-attn --use-distributed-optimizer --swiglu`` and neither sequence
parallelism nor recomputation. Megatron's report_memory divides by 1024², so its "GB"
are GiB. The sequence length is not stated: 2048, its own example's, is assumed.

These rows measured the 2023 legacy ``ParallelMLP``, which the estimate does not
describe in two ways, both visible in the tool's own per-operator breakdown of its
example (mbs 4, seq 2048, hidden 4096, fc1 2 x 10880 wide): ``bias_glue 680.0`` MiB is
fc1's output, SiLU's output and their product (340 + 170 + 170), where Megatron-core's
fused bias-SwiGLU keeps fc1's output and the product only; and Megatron's default
``--hidden-dropout 0.1`` keeps a one-byte mask at each of a layer's two residual adds,
where the Llama preset has no dropout. And its vocab-parallel cross-entropy subtracted
the logits' maximum out of place, making a second fp32 copy of the logits in the loss's
forward; NVIDIA/Megatron-LM commit 9634c0e4a3 (2024-06-13, "Reduce logit memory pressure
by using in-place operation") made it in place, as the estimate counts it. So each row is
reported as estimated for the request (today's Megatron-core) and with those legacy
terms added, computed from the same shapes (the loss's copy where the estimate's peak is
the loss's forward, the moment it lived in). Not counted in the published suite: the sequence length is assumed and the
code is not today's. Writes bench/results/megatron_tool.json.
"""

import json
import math
from pathlib import Path
from typing import Any

import msgspec

from bench.accuracy.published import figure
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate, in_flight
from gpuplan.core.memory.schema import EstimateRequest

RESULTS = Path(__file__).resolve().parents[1] / "results" / "megatron_tool.json"
SOURCE = "NVIDIA/Megatron-LM tools/get_training_info/README.md, commit 9771366921"
GiB = 2**30
SEQ = 2048
LAYERS, HIDDEN, FFN, VOCAB = 32, 4096, 11008, 32000

ROWS = [
    # quote, micro-batch, global batch, data, pipeline, tensor, measured GiB
    ("Llama2 7B | bf16 | 2 | 2048 | 8 | 1 | 1 | 69.1", 2, 2048, 8, 1, 1, 69.1),
    ("Llama2 7B | bf16 | 4 | 512 | 4 | 1 | 2 | 55.7", 4, 512, 4, 1, 2, 55.7),
    ("Llama2 7B | bf16 | 2 | 2048 | 4 | 2 | 1 | 49.8", 2, 2048, 4, 2, 1, 49.8),
    ("Llama2 7B | bf16 | 4 | 128 | 1 | 1 | 8 | 28.8", 4, 128, 1, 1, 8, 28.8),
]


def request(micro: int, global_batch: int, data: int, pipeline: int, tensor: int) -> Any:
    return {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "training",
            "sequence_length": SEQ,
            "batch_size": micro,
            "gradient_accumulation_steps": global_batch // (micro * data),
            "precision": "bf16",
            "parallelism": {
                "tensor": tensor,
                "pipeline": pipeline,
                "data": data,
                "zero_stage": 1,
                "framework": "megatron",
            },
        },
        "gpu": "h100-sxm5-80gb",
    }


def legacy_terms(micro: int, pipeline: int, tensor: int, accumulation: int) -> int:
    """Bytes the 2023 legacy layer keeps beyond Megatron-core's, on the first stage:
    two one-byte dropout masks of the (unsplit) residual stream and SiLU's output (bf16,
    split by tensor parallelism), per layer and micro-batch held."""
    tokens = micro * SEQ
    per_layer = 2 * tokens * HIDDEN + 2 * tokens * FFN // tensor
    body = request(micro, micro * accumulation, 1, pipeline, tensor)
    p = msgspec.convert(body, EstimateRequest).workload.parallelism
    held = math.ceil(LAYERS / pipeline) * in_flight(p, accumulation)
    return round(per_layer * held)


def run() -> dict[str, Any]:
    catalog = builtin_catalog()
    rows = []
    for quote, micro, global_batch, data, pipeline, tensor, measured_gib in ROWS:
        body = request(micro, global_batch, data, pipeline, tensor)
        response = estimate(msgspec.convert(body, EstimateRequest), catalog)
        estimated = figure(response, "max_memory_allocated")
        accumulation = global_batch // (micro * data)
        legacy = estimated + legacy_terms(micro, pipeline, tensor, accumulation)
        if response.peak_phase == "forward (loss)":
            legacy += 4 * micro * SEQ * VOCAB // tensor  # the 2023 loss's second fp32 copy
        measured = measured_gib * GiB
        rows.append(
            {
                "layout": f"mbs {micro}, dp {data}, pp {pipeline}, tp {tensor}",
                "quote": quote,
                "measured_gib": measured_gib,
                "estimated_gib": round(estimated / GiB, 2),
                "error": round(estimated / measured - 1, 4),
                "with_legacy_terms_gib": round(legacy / GiB, 2),
                "legacy_error": round(legacy / measured - 1, 4),
            }
        )
    return {"source": SOURCE, "measure": "max_memory_allocated", "rows": rows}


def table(result: dict[str, Any]) -> str:
    lines = [
        "| layout | measured GiB | estimated GiB | error | with the legacy terms | error |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['layout']} | {r['measured_gib']:.1f} | {r['estimated_gib']:.2f} | "
            f"{r['error']:+.1%} | {r['with_legacy_terms_gib']:.2f} | {r['legacy_error']:+.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    result = run()
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(table(result))


if __name__ == "__main__":
    main()
