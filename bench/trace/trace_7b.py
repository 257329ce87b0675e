"""Trace a 7B Llama training step on fake tensors: time and resident memory.

    python -m bench.trace.trace_7b

Each configuration runs in a fresh interpreter (so its peak RSS is its own) and
traces Llama-2-7B's architecture (random init from the config, no weights) for two
AdamW steps. Writes bench/results/trace_7b.json.
"""

import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"

LLAMA_2_7B = dict(
    model_type="llama",
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=4096,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
)

CONFIGS = [
    {"dtype": "bf16", "amp": "none", "batch": 1, "seq": 4096, "runtime": "cuda"},
    {"dtype": "fp32", "amp": "bf16", "batch": 1, "seq": 2048, "runtime": "cuda"},
    {"dtype": "bf16", "amp": "none", "batch": 1, "seq": 4096, "runtime": "cpu"},
]


def one(config: dict[str, object]) -> dict[str, object]:
    """Run in the child: build, trace, report."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from gpuplan.trace.run import trace

    torch.set_num_threads(2)
    dtypes = {"bf16": torch.bfloat16, "fp32": torch.float32}

    def build():  # type: ignore[no-untyped-def]
        values = dict(LLAMA_2_7B)
        hf = AutoConfig.for_model(values.pop("model_type"), **values)
        model = AutoModelForCausalLM.from_config(
            hf, dtype=dtypes[str(config["dtype"])], attn_implementation="sdpa"
        )
        ids = torch.randint(0, hf.vocab_size, (int(config["batch"]), int(config["seq"])))  # type: ignore[call-overload]
        return model, {"input_ids": ids, "labels": ids}

    started = time.perf_counter()
    result = trace(build, amp=config["amp"], runtime=config["runtime"])  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        **config,
        "parameters": result.parameters,
        "peak_bytes": result.peak_bytes,
        "reserved_bytes": result.reserved_bytes,
        "total_bytes": result.total_bytes,
        "peak_phase": result.peak_phase,
        "breakdown": {
            "parameters_bytes": result.breakdown.parameters_bytes,
            "gradients_bytes": result.breakdown.gradients_bytes,
            "optimizer_state_bytes": result.breakdown.optimizer_state_bytes,
            "activations_bytes": result.breakdown.activations_bytes,
            "temporary_bytes": result.breakdown.temporary_bytes,
            "other_bytes": result.breakdown.other_bytes,
        },
        "trace_seconds": round(seconds, 2),
        "max_rss_bytes": rss,
    }


def run(configs: list[dict[str, object]] | None = None) -> dict[str, object]:
    """Trace each configuration (default: ``CONFIGS``) in a fresh interpreter."""
    rows = []
    for config in configs or CONFIGS:
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-m", "bench.trace.trace_7b", "--child", json.dumps(config)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row["process_seconds"] = round(time.perf_counter() - started, 2)
        rows.append(row)
        print(
            f"{config}: peak {row['peak_bytes'] / 2**30:.2f} GiB, reserved {row['reserved_bytes'] / 2**30:.2f} GiB, "
            f"trace {row['trace_seconds']} s, process {row['process_seconds']} s, RSS {row['max_rss_bytes'] / 2**30:.2f} GiB",
            flush=True,
        )
    import torch
    import transformers

    return {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "rows": rows,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(one(json.loads(sys.argv[2]))))
        return
    result = run()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "trace_7b.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
