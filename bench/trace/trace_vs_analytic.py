"""Analytic estimate vs traced peak at sizes no CPU can run for real.

    python -m bench.trace.trace_vs_analytic [--only NAME]

The accuracy grid checks the analytic estimator against real steps of small models;
this checks it at realistic sizes (7B, 8B, 70B, Mixtral 8x7B) against the tracer,
which is exact for tensor accounting (docs/trace.md). Both sides use runtime cpu
(tensor bytes, no framework overhead) and the estimator's semantics: a steady-state
AdamW step with every-position cross-entropy, or an inference prefill that keeps its
KV cache and last-position logits. Writes bench/results/trace_vs_analytic.json.
"""

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, ModelSpec, Workload
from gpuplan.core.trace.schema import TraceWorkload
from gpuplan.trace.hf import builder
from gpuplan.trace.run import trace

RESULTS = Path(__file__).resolve().parents[1] / "results"

LLAMA_2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
LLAMA_3_8B = {
    **LLAMA_2_7B,
    "intermediate_size": 14336,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
}
LLAMA_3_70B = {
    **LLAMA_3_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
}
MIXTRAL_8X7B = {
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "tie_word_embeddings": False,
}

# (name, config, mode, precision, batch, sequence, checkpointing)
CASES: list[tuple[str, dict[str, Any], str, str, int, int, str]] = [
    ("llama-2-7b train bf16 b1 s4096", LLAMA_2_7B, "training", "bf16", 1, 4096, "none"),
    ("llama-2-7b train amp_bf16 b1 s2048", LLAMA_2_7B, "training", "amp_bf16", 1, 2048, "none"),
    ("llama-3-8b train bf16 b2 s2048 ckpt", LLAMA_3_8B, "training", "bf16", 2, 2048, "full"),
    ("llama-3-8b inference bf16 b8 s4096", LLAMA_3_8B, "inference", "bf16", 8, 4096, "none"),
    ("llama-3-70b train bf16 b1 s4096 ckpt", LLAMA_3_70B, "training", "bf16", 1, 4096, "full"),
    ("llama-3-70b inference bf16 b4 s8192", LLAMA_3_70B, "inference", "bf16", 4, 8192, "none"),
    ("mixtral-8x7b train bf16 b1 s4096", MIXTRAL_8X7B, "training", "bf16", 1, 4096, "none"),
]
PRECISION = {"bf16": ("bf16", "none"), "amp_bf16": ("fp32", "bf16")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only")
    args = parser.parse_args()
    torch.set_num_threads(2)
    catalog = builtin_catalog()
    rows = []
    for name, config, mode, precision, batch, seq, ckpt in CASES:
        if args.only and args.only not in name:
            continue
        analytic = estimate(
            EstimateRequest(
                model=ModelSpec(hf_config=config),
                workload=Workload(
                    mode=mode,  # type: ignore[arg-type]
                    batch_size=batch,
                    sequence_length=seq,
                    precision=precision,  # type: ignore[arg-type]
                    gradient_checkpointing=ckpt,  # type: ignore[arg-type]
                ),
                runtime="cpu",
            ),
            catalog,
        )
        dtype, amp = PRECISION[precision]
        workload = TraceWorkload(
            mode="training" if mode == "training" else "inference",
            batch_size=batch,
            sequence_length=seq,
            dtype=dtype,  # type: ignore[arg-type]
            amp=amp,  # type: ignore[arg-type]
            gradient_checkpointing=ckpt == "full",
            steps=2 if mode == "training" else 1,
        )
        started = time.perf_counter()
        traced = trace(
            builder(config, workload),
            mode=workload.mode,
            steps=workload.steps,
            amp=workload.amp,
            runtime="cpu",
        )
        seconds = time.perf_counter() - started
        error = (analytic.peak_bytes - traced.peak_bytes) / traced.peak_bytes
        rows.append(
            {
                "case": name,
                "parameters_analytic": analytic.parameters,
                "parameters_traced": traced.parameters,
                "analytic_bytes": analytic.peak_bytes,
                "traced_bytes": traced.peak_bytes,
                "analytic_error": error,
                "analytic_phase": analytic.peak_phase,
                "traced_phase": traced.peak_phase,
                "trace_seconds": round(seconds, 1),
            }
        )
        print(
            f"{name:40s} analytic {analytic.peak_bytes / 2**30:8.2f} GiB  traced "
            f"{traced.peak_bytes / 2**30:8.2f} GiB  error {error:+.2%}  ({seconds:.0f} s)",
            flush=True,
        )
    if not args.only:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "trace_vs_analytic.json").write_text(
            json.dumps({"torch": torch.__version__, "rows": rows}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
