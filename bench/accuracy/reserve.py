"""``reserved_bytes`` against the tracer's replay of the caching allocator.

    PYTHONPATH=service:. python -m bench.accuracy.reserve [--only NAME]

The estimator's ``reserved_bytes`` replays a step *written down from its own terms*
(core/memory/reserve.py). The tracer (``runtime: cuda``) replays the allocations the
real Hugging Face step makes, op by op, through the same rules of PyTorch's caching
allocator. Both are models of ``torch.cuda.max_memory_reserved``; this compares them
at GPU sizes (Llama-3.2-3B and Llama-2-7B shapes, 4 to 16 layers, fake tensors, so
any CPU runs it), with and without checkpointing, full training and LoRA, to show
that the written-down step reproduces the allocator gap of the real one. The cases are
data (bench/accuracy/reserve.toml). Writes bench/results/reserve_replay.json;
docs/memory.md quotes it.
"""

import argparse
import json
import time
from pathlib import Path
from typing import Any

import msgspec
import torch

from bench.accuracy.stats import error_stats, write_run
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, Workload
from gpuplan.trace.run import trace

FILE = Path(__file__).with_name("reserve.toml")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class Case(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A model of ``shape`` with ``layers`` layers, and its workload as the API takes it."""

    name: str
    shape: str
    layers: int
    workload: dict[str, Any]


class _File(msgspec.Struct, forbid_unknown_fields=True):
    shape: dict[str, dict[str, Any]]
    case: list[Case]


def _load() -> tuple[dict[str, dict[str, Any]], list[Case]]:
    """The shapes and cases of ``reserve.toml``; every case's request is checked here."""
    data = msgspec.toml.decode(FILE.read_bytes(), type=_File)
    for case in data.case:
        msgspec.convert(request_body(case, data.shape), EstimateRequest)
    return data.shape, data.case


def request_body(case: Case, shapes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The estimate request of ``case``, as JSON: the results keep it with the figures."""
    config = {**shapes[case.shape], "num_hidden_layers": case.layers}
    return {"model": {"hf_config": config}, "workload": case.workload}


SHAPES, CASES = _load()


def _build(config: dict[str, Any], workload: Workload) -> Any:
    from transformers import AutoConfig, AutoModelForCausalLM

    values = dict(config)
    hf = AutoConfig.for_model(values.pop("model_type"), **values)
    assert workload.sequence_length is not None, "every case gives its sequence_length"
    shape = (workload.batch_size, workload.sequence_length)

    def build() -> Any:
        model = AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            hf, dtype=DTYPES[workload.precision], attn_implementation="sdpa"
        )
        if workload.gradient_checkpointing == "full":
            model.gradient_checkpointing_enable()
        if workload.lora is not None:
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(r=workload.lora.rank, target_modules=workload.lora.target_modules)
            model = get_peft_model(model, lora)
        ids = torch.randint(0, hf.vocab_size, shape)
        return model, {"input_ids": ids, "labels": ids}

    return build


def run_case(case: Case) -> dict[str, Any]:
    body = request_body(case, SHAPES)
    request = msgspec.convert(body, EstimateRequest)
    started = time.perf_counter()
    traced = trace(
        _build(body["model"]["hf_config"], request.workload), runtime="cuda", foreach=True
    )
    seconds = time.perf_counter() - started
    estimated = estimate(request, builtin_catalog())
    return {
        "case": case.name,
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
        if args.only and args.only not in case.name:
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
