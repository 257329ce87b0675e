"""Trace time of decode steps: Llama-2-7B inference, prompt 512, N new tokens.

    python -m bench.trace.trace_decode

Each decode step is a full forward of one token through every layer on fake tensors,
so its trace time grows with the layer count and the number of steps, not with the
model's size in bytes. Traces the prefill alone and with 8 and 32 new tokens (bf16
weights, batch 1, runtime cuda) in this process, one after another, and reports the
time per decode step from the difference. Writes bench/results/trace_decode.json.
"""

import json
import platform
import time
from pathlib import Path
from typing import Any

import msgspec
import torch

from bench.trace.trace_7b import LLAMA_2_7B
from gpuplan.core.trace.schema import TraceWorkload
from gpuplan.trace.hf import builder
from gpuplan.trace.run import trace

RESULTS = Path(__file__).resolve().parents[1] / "results" / "trace_decode.json"
NEW_TOKENS = (0, 8, 32)


def run() -> dict[str, Any]:
    torch.set_num_threads(2)
    rows = []
    for new_tokens in NEW_TOKENS:
        workload = msgspec.convert(
            {
                "mode": "inference",
                "batch_size": 1,
                "sequence_length": 512,
                "dtype": "bf16",
                "steps": 1,
                "new_tokens": new_tokens,
            },
            TraceWorkload,
        )
        started = time.perf_counter()
        result = trace(
            builder(LLAMA_2_7B, workload),
            mode="inference",
            optimizer="none",
            steps=1,
            runtime="cuda",
            new_tokens=new_tokens,
        )
        seconds = time.perf_counter() - started
        rows.append(
            {
                "new_tokens": new_tokens,
                "trace_seconds": round(seconds, 2),
                "peak_bytes": result.peak_bytes,
                "decode_bytes": result.phases.decode_bytes,
                "peak_phase": result.peak_phase,
            }
        )
        print(rows[-1], flush=True)
    first, last = rows[1], rows[-1]
    per_step = (last["trace_seconds"] - first["trace_seconds"]) / (
        last["new_tokens"] - first["new_tokens"]
    )
    return {
        "torch": torch.__version__,
        "machine": f"{platform.machine()}, {torch.get_num_threads()} threads",
        "layers": LLAMA_2_7B["num_hidden_layers"],
        "seconds_per_decode_step": round(per_step, 3),
        "rows": rows,
    }


def main() -> None:
    result = run()
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['seconds_per_decode_step']} s per decode step")


if __name__ == "__main__":
    main()
