"""The traced column of the accuracy table: each accuracy case traced on fake tensors.

    python -m bench.accuracy.trace_column [--only NAME]

For every case of bench/accuracy/cases.py, the same Hugging Face model is built from
the same config under fake tensors and takes the same steps (runtime cpu: plain
tensor bytes, what the CPU measurement counts). The measured and analytic figures
are read from bench/results/accuracy.json (written by bench.accuracy.run), so the
three columns describe the same runs. Writes bench/results/accuracy_traced.json.
"""

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from bench.accuracy.cases import GRID, Case
from bench.accuracy.stats import error_stats, write_run
from gpuplan.core.trace.schema import TraceWorkload
from gpuplan.trace.hf import builder
from gpuplan.trace.run import trace

RESULTS = Path(__file__).resolve().parent.parent / "results"
PRECISION = {
    "fp32": ("fp32", "none"),
    "fp16": ("fp16", "none"),
    "bf16": ("bf16", "none"),
    "amp_bf16": ("fp32", "bf16"),
}


def trace_case(case: Case) -> tuple[int | None, str, float]:
    """Traced peak bytes of ``case`` (None when the trace cannot describe it)."""
    if case.framework:
        return None, "the tracer runs one process's step, not FSDP1's ranks", 0.0
    if case.optimizer == "adafactor":
        return None, "Adafactor reads tensor values (.item()), which fake tensors have not", 0.0
    if case.mode == "finetune_lora":
        return None, "the Hugging Face builder adds no PEFT adapters", 0.0
    if case.head:
        return None, "the Hugging Face builder builds the model's usual head only", 0.0
    if case.loss_chunks > 1 or case.in_backward:
        # The tracer takes such a loop as the user's own step (--step file.py:train_step);
        # this column runs the Trainer-style step of every other case.
        return None, "a chunked loss or an optimizer step in backward is the user's loop", 0.0
    dtype, amp = PRECISION[case.precision]
    workload = TraceWorkload(
        mode="inference" if case.mode == "inference" else "training",
        batch_size=case.batch,
        sequence_length=case.seq,
        dtype=dtype,  # type: ignore[arg-type]
        amp=amp,  # type: ignore[arg-type]
        optimizer=case.optimizer,  # type: ignore[arg-type]
        attention=case.attention,  # type: ignore[arg-type]
        gradient_checkpointing=case.checkpointing == "full",
        steps=1 if case.mode == "inference" else 2,
        new_tokens=case.new_tokens,
        keep_outputs=case.keep_outputs,
    )
    started = time.perf_counter()
    result = trace(
        builder(case.config, workload),
        mode=workload.mode,
        optimizer=workload.optimizer,
        steps=workload.steps,
        amp=workload.amp,
        runtime="cpu",
        accumulation=case.accumulation,
        new_tokens=case.new_tokens,
        keep_outputs=case.keep_outputs,
    )
    return result.peak_bytes, result.peak_phase, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only")
    args = parser.parse_args()
    torch.set_num_threads(2)
    measured = {
        row["case"]: row for row in json.loads((RESULTS / "accuracy.json").read_text())["rows"]
    }
    rows: list[dict[str, Any]] = []
    for case in GRID:
        if args.only and args.only not in case.name:
            continue
        traced, phase, seconds = trace_case(case)
        base = measured.get(case.name, {})
        real = base.get("measured_bytes")
        row = {
            "case": case.name,
            "measured_bytes": real,
            "analytic_bytes": base.get("estimated_bytes"),
            "traced_bytes": traced,
            "traced_error": None if traced is None or not real else (traced - real) / real,
            "analytic_error": base.get("error"),
            "traced_phase": phase,
            "trace_seconds": round(seconds, 2),
        }
        rows.append(row)
        error = row["traced_error"]
        print(
            f"{case.name:32s} measured {real or 0:>12}  traced {traced or 0:>12}  "
            + (f"error {error:+.4%}" if error is not None else phase),
            flush=True,
        )
    errors = [r["traced_error"] for r in rows if r["traced_error"] is not None]
    summary = {**error_stats(errors), "cases": len(rows), "traced_cases": len(errors)}
    print(json.dumps(summary))
    if not args.only:
        write_run("accuracy_traced.json", summary, rows)


if __name__ == "__main__":
    main()
