"""The caching allocator under batches of varying length, on a real NVIDIA GPU.

    PYTHONPATH=service:. python -m bench.accuracy.varlen_cuda [--steps 12]

Published ``max_memory_reserved`` figures of whole fine-tuning runs (PEFT's method
comparison, torchtune) sit above what one step at the longest length reserves: each
batch is padded to its own longest sequence, so the step's tensors change size from one
batch to the next and the allocator's cached blocks stop fitting. This measures that
gap on one model (reserve.toml's Llama-3.2-3B shape with 8 layers, bf16, AdamW foreach,
batch 4), each run in a fresh process:

- ``fixed``: every batch at the longest length;
- ``varying``: lengths drawn once (seeded) between 64 and the longest, the first batch
  at the longest, as a run whose longest sample comes early;
- ``varying_expandable``: the same with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``.

Per step: ``max_memory_allocated`` (reset at each step) and ``memory_reserved`` after it.
Writes bench/results/varlen_cuda.json. Needs a CUDA torch; refuses to run without a GPU.
"""

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

RESULTS = Path(__file__).resolve().parents[1] / "results"
LONGEST = 768
BATCH = 4


def lengths(steps: int, varying: bool) -> list[int]:
    if not varying:
        return [LONGEST] * steps
    rng = random.Random(0)
    return [LONGEST] + [rng.randint(64, LONGEST) for _ in range(steps - 1)]


def config() -> Any:
    """The model's Hugging Face config: reserve.toml's Llama-3.2-3B shape, 8 layers."""
    from transformers import AutoConfig

    from bench.accuracy.reserve import SHAPES

    values: dict[str, Any] = {**SHAPES["llama-3b"], "num_hidden_layers": 8}
    return AutoConfig.for_model(str(values.pop("model_type")), **values)


def train_step(model: Any, optimizer: Any, ids: torch.Tensor) -> None:
    """One step as the measured loop runs it (bench.accuracy.varlen_replay replays it)."""
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(kind: str, steps: int) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM

    hf = config()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            hf, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    rows = []
    for length in lengths(steps, kind != "fixed"):
        ids = torch.randint(0, hf.vocab_size, (BATCH, length), device="cuda")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        train_step(model, optimizer, ids)
        torch.cuda.synchronize()
        rows.append(
            {
                "length": length,
                "max_memory_allocated": torch.cuda.max_memory_allocated(),
                "memory_reserved": torch.cuda.memory_reserved(),
            }
        )
    return {
        "kind": kind,
        "steps": rows,
        "max_allocated": max(r["max_memory_allocated"] for r in rows),
        "max_reserved": max(r["memory_reserved"] for r in rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", type=Path, default=RESULTS / "varlen_cuda.json")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.one, args.steps)))
        return
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this check needs an NVIDIA GPU")
    runs: list[dict[str, Any]] = []
    for kind in ("fixed", "varying", "varying_expandable"):
        env = dict(os.environ)
        if kind == "varying_expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "bench.accuracy.varlen_cuda", "--one", kind,
             "--steps", str(args.steps)],
            capture_output=True, text=True, check=False, env=env,
        )  # fmt: skip
        if out.returncode != 0:
            runs.append({"kind": kind, "error": out.stderr[-2000:]})
        else:
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        runs[-1]["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "steps"}), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            json.dumps(
                {
                    "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "machine": platform.machine(),
                    "date": time.strftime("%Y-%m-%d", time.gmtime()),
                    "model": "reserve.toml llama-3b shape, 8 layers, bf16, AdamW foreach",
                    "batch": BATCH,
                    "runs": runs,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
