"""``reserved_bytes`` against the tracer's replay of the caching allocator.

    PYTHONPATH=service:. python -m bench.accuracy.reserve [--only NAME]

The estimator's ``reserved_bytes`` replays a step *written down from its own terms*
(core/memory/reserve.py). The tracer (``runtime: cuda``) replays the allocations the
real Hugging Face step makes, op by op, through the same rules of PyTorch's caching
allocator. Both are models of ``torch.cuda.max_memory_reserved``; this compares them
at GPU sizes (Llama-3.2-3B and Llama-2-7B shapes, 4 to 16 layers, fake tensors, so
any CPU runs it), with and without checkpointing, full training and LoRA, to show
that the written-down step reproduces the allocator gap of the real one. Writes
bench/results/reserve_replay.json; docs/memory.md quotes it.
"""

import argparse
import json
import time
from typing import Any

import msgspec
import torch

from bench.stats import error_stats, write_run
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest
from gpuplan.trace.run import trace

LLAMA_3B = {
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "tie_word_embeddings": True,
    "max_position_embeddings": 8192,
}
LLAMA_7B = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
}
WIDE_VOCAB = {
    "model_type": "llama",
    "vocab_size": 50000,
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
}

# name, config, layers, batch, sequence, dtype, checkpointing, LoRA targets
CASES: list[tuple[str, dict[str, Any], int, int, int, str, bool, tuple[str, ...]]] = [
    ("3b-shape L8 b4 s768", LLAMA_3B, 8, 4, 768, "bf16", False, ()),
    ("3b-shape L4 b4 s768", LLAMA_3B, 4, 4, 768, "bf16", False, ()),
    ("3b-shape L16 b4 s768", LLAMA_3B, 16, 4, 768, "bf16", False, ()),
    ("3b-shape L8 b4 s768 ckpt", LLAMA_3B, 8, 4, 768, "bf16", True, ()),
    ("3b-shape L4 b4 s768 ckpt", LLAMA_3B, 4, 4, 768, "bf16", True, ()),
    ("3b-shape L16 b4 s768 ckpt", LLAMA_3B, 16, 4, 768, "bf16", True, ()),
    ("3b-shape L8 b4 s768 lora", LLAMA_3B, 8, 4, 768, "bf16", False, ("q_proj", "v_proj")),
    ("3b-shape L8 b4 s768 lora ckpt", LLAMA_3B, 8, 4, 768, "bf16", True, ("q_proj", "v_proj")),
    ("3b-shape L8 b1 s4096", LLAMA_3B, 8, 1, 4096, "bf16", False, ()),
    ("3b-shape L8 b2 s512", LLAMA_3B, 8, 2, 512, "bf16", False, ()),
    ("3b-shape L8 b8 s2048 ckpt", LLAMA_3B, 8, 8, 2048, "bf16", True, ()),
    ("7b-shape L8 b8 s512", LLAMA_7B, 8, 8, 512, "bf16", False, ()),
    ("7b-shape L8 b2 s512 ckpt", LLAMA_7B, 8, 2, 512, "bf16", True, ()),
    ("7b-shape L8 b2 s512 lora ckpt", LLAMA_7B, 8, 2, 512, "bf16", True, ("q_proj", "v_proj")),
    ("7b-shape L4 b8 s512 fp32", LLAMA_7B, 4, 8, 512, "fp32", False, ()),
    ("50k-vocab L8 b16 s1024 ckpt", WIDE_VOCAB, 8, 16, 1024, "bf16", True, ()),
    ("50k-vocab L8 b16 s1024", WIDE_VOCAB, 8, 16, 1024, "bf16", False, ()),
]

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _build(
    config: dict[str, Any], batch: int, seq: int, dtype: str, ckpt: bool, lora: tuple[str, ...]
) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(config)
    hf = AutoConfig.for_model(values.pop("model_type"), **values)

    def build() -> Any:
        model = AutoModelForCausalLM.from_config(
            hf, dtype=DTYPES[dtype], attn_implementation="sdpa"
        )
        if ckpt:
            model.gradient_checkpointing_enable()
        if lora:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=16, target_modules=list(lora)))
        ids = torch.randint(0, hf.vocab_size, (batch, seq))
        return model, {"input_ids": ids, "labels": ids}

    return build


def run_case(case: tuple[Any, ...]) -> dict[str, Any]:
    name, config, layers, batch, seq, dtype, ckpt, lora = case
    config = {**config, "num_hidden_layers": layers}
    started = time.perf_counter()
    traced = trace(_build(config, batch, seq, dtype, ckpt, lora), runtime="cuda", foreach=True)
    seconds = time.perf_counter() - started
    workload: dict[str, Any] = {
        "mode": "finetune_lora" if lora else "training",
        "batch_size": batch,
        "sequence_length": seq,
        "precision": dtype,
        "gradient_checkpointing": "full" if ckpt else "none",
    }
    if lora:
        workload["lora"] = {"rank": 16, "target_modules": list(lora)}
    body = {"model": {"hf_config": config}, "workload": workload}
    estimated = estimate(msgspec.convert(body, EstimateRequest), builtin_catalog())
    return {
        "case": name,
        "request": body,
        "traced_peak_bytes": traced.peak_bytes,
        "traced_reserved_bytes": traced.reserved_bytes,
        "estimated_peak_bytes": estimated.peak_bytes,
        "estimated_reserved_bytes": estimated.reserved_bytes,
        "error": estimated.reserved_bytes / traced.reserved_bytes - 1,
        "traced_gap_bytes": traced.reserved_bytes - traced.peak_bytes,
        "estimated_gap_bytes": estimated.breakdown.allocator_cache_bytes,
        "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only")
    args = parser.parse_args()
    torch.set_num_threads(2)
    rows = []
    for case in CASES:
        if args.only and args.only not in case[0]:
            continue
        row = run_case(case)
        rows.append(row)
        print(
            f"{row['case']:32s} traced {row['traced_reserved_bytes'] / 2**30:7.2f} GiB "
            f"(gap {row['traced_gap_bytes'] / 2**20:6.0f} MiB)  estimated "
            f"{row['estimated_reserved_bytes'] / 2**30:7.2f} GiB "
            f"(gap {row['estimated_gap_bytes'] / 2**20:6.0f} MiB)  {row['error']:+6.1%}",
            flush=True,
        )
    summary = error_stats([r["error"] for r in rows])
    print(json.dumps(summary))
    if not args.only:
        write_run("reserve_replay.json", summary, rows)


if __name__ == "__main__":
    main()
