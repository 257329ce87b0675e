"""The allocator replay against the H200's runs of varying-length batches.

    PYTHONPATH=service:. python -m bench.accuracy.varlen_replay

bench.accuracy.varlen_cuda measured, on an H200, one model trained with batches of a
fixed length, of varying lengths, and of varying lengths under
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (bench/results/varlen_cuda.json).
This traces the same steps, at the same lengths in the same order, on fake tensors on
any CPU (``gpuplan.trace`` with ``runtime: cuda``), and replays their allocations
through the caching-allocator model: the default one for the first two runs, the
expandable-segments one for the third. Reserved memory only grows within a run, so the
replay's reserved peak over all steps is the run's last ``memory_reserved``; the traced
peak describes the last step, so it is compared with that step's
``max_memory_allocated``. Neither model was fitted to these runs: their rules are read
from PyTorch's allocator source (core/trace/allocator.py). Writes
bench/results/varlen_replay.json; docs/memory.md quotes it.
"""

import json
import time
from collections.abc import Iterator
from typing import Any

import torch

from bench.accuracy.stats import RESULTS, error_stats, write_run
from bench.accuracy.varlen_cuda import BATCH, LONGEST, config, lengths, train_step
from gpuplan.trace.run import trace

MEASURED = RESULTS / "varlen_cuda.json"


def replay(kind: str, steps: list[int]) -> dict[str, Any]:
    """Trace the run ``kind`` at the lengths ``steps``; its replayed figures."""
    from transformers import AutoModelForCausalLM

    hf = config()
    order: Iterator[int] = iter(steps)

    def build() -> Any:
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            hf, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
        return model, {"input_ids": torch.zeros(BATCH, LONGEST, dtype=torch.long)}

    def step(model: Any, _: Any, optimizer: Any) -> None:
        train_step(model, optimizer, torch.randint(0, hf.vocab_size, (BATCH, next(order))))

    started = time.perf_counter()
    traced = trace(
        build,
        runtime="cuda",
        foreach=True,
        steps=len(steps),
        user_step=step,
        expandable_segments=kind.endswith("expandable"),
    )
    return {
        "last_step_peak_bytes": traced.peak_bytes,
        "reserved_bytes": traced.reserved_bytes,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    torch.set_num_threads(2)
    measured = json.loads(MEASURED.read_text())
    rows = []
    for run in measured["runs"]:
        steps = [s["length"] for s in run["steps"]]
        # The measured lengths are the seeded draw varlen_cuda makes: the same run.
        assert steps == lengths(len(steps), run["kind"] != "fixed"), run["kind"]
        got = replay(run["kind"], steps)
        last = run["steps"][-1]["max_memory_allocated"]
        row = {
            "kind": run["kind"],
            "lengths": steps,
            "measured_max_memory_reserved": run["max_reserved"],
            "measured_last_step_max_memory_allocated": last,
            "replayed_reserved_bytes": got["reserved_bytes"],
            "replayed_last_step_peak_bytes": got["last_step_peak_bytes"],
            "reserved_error": got["reserved_bytes"] / run["max_reserved"] - 1,
            "peak_error": got["last_step_peak_bytes"] / last - 1,
            "seconds": got["seconds"],
        }
        rows.append(row)
        print(
            f"{row['kind']:20s} reserved: measured {run['max_reserved'] / 1e9:6.2f} GB, "
            f"replayed {got['reserved_bytes'] / 1e9:6.2f} GB ({row['reserved_error']:+.2%}); "
            f"last step's peak {row['peak_error']:+.2%}",
            flush=True,
        )
    summary = {
        "measured_on": f"{measured['gpu']}, torch {measured['torch']}, {measured['date']}",
        "reserved": error_stats([r["reserved_error"] for r in rows]),
        "last_step_peak": error_stats([r["peak_error"] for r in rows]),
    }
    print(json.dumps(summary["reserved"]))
    write_run("varlen_replay.json", summary, rows)


if __name__ == "__main__":
    main()
