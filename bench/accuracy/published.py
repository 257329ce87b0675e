"""The estimator against published real-GPU memory figures, each in its own measure.

    PYTHONPATH=service:. python -m bench.accuracy.published [--table]

The cases are data (bench/accuracy/published.toml): each carries its source (a
repository file at a commit, a paper table, an issue), the exact quote, which measure
the figure is (``MEASURES``), the publication it came from (``source_id``: one document,
one issue thread, one paper; leave-one-source-out cross-validation groups by it) and
the regime it stands for (``REGIMES``). The estimate's figure for that measure is
compared; nothing is fitted to these cases. A case whose figure is decided by something
a request cannot express says so (``excluded``, with the reason and its source) and
stays in the table, outside the statistics; a case the estimator cannot run yet
(``pending``: what is missing, e.g. a framework it does not model) is not estimated and
is reported as pending, the target of later work.

``summary`` keeps the statistics of the cases the estimator was developed against
(``added_in = "issue-18"``; docs/accuracy.md quotes them); ``held_out`` are the cases
added later (issue 33), which nobody tuned the estimator to, overall, by source and by
regime. Writes bench/results/published.json.
"""

import json
import re
import statistics
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from bench.accuracy.stats import error_stats
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.schema import EstimateRequest, EstimateResponse

HERE = Path(__file__).resolve().parent
CASES = HERE / "published.toml"
RESULTS = HERE.parent / "results" / "published.json"

MEASURES = {
    "max_memory_allocated": "torch.cuda.max_memory_allocated(): peak_bytes",
    "max_memory_reserved": "torch.cuda.max_memory_reserved(): reserved_bytes",
    "nvidia_smi": "a GPU monitor's memory used by the process: device_bytes",
    "allocated_plus_outside": "optimum's max_memory_allocated + (nvidia-smi - reserved)",
    "vllm_model_weights": "vLLM's 'Model loading took' / 'model weights take': weights_bytes",
}
"""Every measure a case may name, with what the estimate compares (``figure``)."""

REGIMES = {
    "megatron_3d": "Megatron-style tensor / pipeline / data parallel training",
    "quantized_inference": "weight-only quantized inference (GPTQ, AWQ, bitsandbytes, fp8)",
    "inference_unquantized": "unquantized (16- or 32-bit) inference and serving",
    "lora": "LoRA and QLoRA fine-tuning, on one GPU or sharded (FSDP, ZeRO)",
    "single_device_recipe": "single-GPU full fine-tuning recipes (compile, chunked "
    "cross-entropy, checkpointing, offload)",
    "hf_trainer": "Hugging Face Trainer runs read with nvidia-smi or its memory metrics",
    "fsdp2": "FSDP2 (fully_shard) training, reserved memory",
    "deepspeed_zero": "DeepSpeed ZeRO full training",
}
"""The regimes the corpus is balanced across (issue 33)."""

COHORTS = ("issue-18", "issue-33")
"""``added_in``: issue 18's cases, which the estimator was developed against, and the
held-out cases issue 33 added."""

HELD_OUT = tuple(
    re.compile(p)
    for p in (
        r"perf_train_gpu_one",  # transformers: single-GPU training
        r"llm_optims|llm_tutorial_optimization",  # transformers: LLM optimization
        r"litgpt",
        r"torchtune\b.*readme",
        r"pytorch/torchtitan\b|torchtitan/docs|torchtitan's (benchmark|report)",  # its reports
        r"1910\.02054|zero: memory optimizations toward",  # the ZeRO paper
        r"nanotron",
        r"ultra-?scale",  # the Ultra-Scale Playbook
        r"autoawq\b.*readme",
        r"torchao/quantization/readme|\bao\b.*quantization/readme",
    )
)
"""The documents issue 33 holds out: no case may cite them (its source or source_id)."""

SOURCE_ID = re.compile(r"^[a-z0-9][a-z0-9-]{2,63}$")
REQUIRED = ("id", "source_id", "source", "quote", "measure", "bytes", "regime", "added_in")


class CaseError(ValueError):
    """A case in published.toml that cannot be read, naming the case and the field."""


def figure(r: EstimateResponse, measure: str) -> int:
    """The estimate's figure for what the source measured.

    ``vllm_model_weights``: vLLM logs the bytes its model loading left allocated,
    ``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()`` taken
    before and after loading (DeviceMemoryProfiler; ``get_current_memory_usage`` in
    vllm/platforms/cuda.py at 002db4951e0c4b326a559eb44b05698afd3e534a): the parameters
    and buffers of the model, quantized ones in their stored layout, one tensor-parallel
    shard of them. The estimate's ``weights_bytes`` of the matching inference request is
    that tensor set.
    """
    b = r.breakdown
    if measure == "max_memory_allocated":
        return r.peak_bytes  # the tensors and the cuBLAS workspaces
    if measure == "max_memory_reserved":
        return r.reserved_bytes
    if measure == "nvidia_smi":
        return r.device_bytes
    if measure == "allocated_plus_outside":
        return r.peak_bytes + b.context_bytes + b.communication_buffers_bytes
    if measure == "vllm_model_weights":
        return b.weights_bytes
    raise ValueError(f"unknown measure {measure!r}")


def _check(case: dict[str, Any], index: int, seen: set[str]) -> None:
    name = case.get("id", f"case {index}")
    for field in REQUIRED:
        if field not in case or case[field] in ("", None):
            raise CaseError(f"{name}: {field} is required")
    if case["id"] in seen:
        raise CaseError(f"{name}: id is used twice")
    if not SOURCE_ID.match(case["source_id"]):
        raise CaseError(f"{name}: source_id {case['source_id']!r} is not a short slug")
    cited = f"{case['source']} {case['source_id']}".lower()
    if any(p.search(cited) for p in HELD_OUT):
        raise CaseError(f"{name}: its source is a held-out document")
    if case["measure"] not in MEASURES:
        raise CaseError(f"{name}: measure {case['measure']!r} is not one of {list(MEASURES)}")
    if case["regime"] not in REGIMES:
        raise CaseError(f"{name}: regime {case['regime']!r} is not one of {list(REGIMES)}")
    if case["added_in"] not in COHORTS:
        raise CaseError(f"{name}: added_in {case['added_in']!r} is not one of {COHORTS}")
    if not isinstance(case["bytes"], int) or case["bytes"] <= 0:
        raise CaseError(f"{name}: bytes must be a positive integer")
    if not isinstance(case.get("request"), dict):
        raise CaseError(f"{name}: request is required")
    if case.get("pending") is not None and not case["pending"]:
        raise CaseError(f"{name}: pending must say what is missing")
    if case.get("pending") and case.get("excluded"):
        raise CaseError(f"{name}: a case is pending or excluded, not both")


def cases() -> list[dict[str, Any]]:
    """The cases, each checked for the fields every case must carry."""
    loaded = list(tomllib.loads(CASES.read_text(encoding="utf-8"))["case"])
    seen: set[str] = set()
    for index, case in enumerate(loaded):
        _check(case, index, seen)
        seen.add(case["id"])
    return loaded


def request_of(case: dict[str, Any]) -> EstimateRequest:
    """The case's request, with its GPU, as the estimator takes it."""
    body = dict(case["request"])
    if case.get("gpu"):
        body.setdefault("gpu", case["gpu"])
    return msgspec.convert(body, EstimateRequest)


def _signed(errors: list[float]) -> dict[str, Any]:
    """The held-out figures: how many, the median and the worst error, signed."""
    if not errors:
        return {"cases": 0, "median_error": None, "worst_error": None}
    return {
        "cases": len(errors),
        "median_error": statistics.median(errors),
        "worst_error": max(errors, key=abs),
        "median_abs_error": statistics.median(abs(e) for e in errors),
    }


def run() -> dict[str, Any]:
    catalog = builtin_catalog()
    rows = []
    for case in cases():
        row: dict[str, Any] = {
            "id": case["id"],
            "source_id": case["source_id"],
            "regime": case["regime"],
            "added_in": case["added_in"],
            "excluded": case.get("excluded", ""),
            "pending": case.get("pending", ""),
            "measure": case["measure"],
            "published_bytes": case["bytes"],
            "estimated_bytes": None,
            "error": None,
            "peak_phase": None,
        }
        if not row["pending"]:
            result = estimate(request_of(case), catalog)
            estimated = figure(result, case["measure"])
            row |= {
                "estimated_bytes": estimated,
                "error": estimated / case["bytes"] - 1,
                "peak_phase": result.peak_phase,
            }
        rows.append(row)
    counted = [r for r in rows if r["error"] is not None and not r["excluded"]]
    developed = [r["error"] for r in counted if r["added_in"] == "issue-18"]
    held = [r for r in counted if r["added_in"] == "issue-33"]
    summary = {
        **error_stats(developed),
        "excluded": sum(1 for r in rows if r["excluded"] and r["added_in"] == "issue-18"),
    }
    held_out = {
        **error_stats([r["error"] for r in held]),
        **_signed([r["error"] for r in held]),
        "excluded": sum(1 for r in rows if r["excluded"] and r["added_in"] == "issue-33"),
        "pending": sum(1 for r in rows if r["pending"]),
        "by_source": {
            s: _signed([r["error"] for r in held if r["source_id"] == s])
            for s in sorted({r["source_id"] for r in held})
        },
        "by_regime": {
            g: _signed([r["error"] for r in held if r["regime"] == g])
            for g in sorted({r["regime"] for r in held})
        },
    }
    return {"summary": summary, "held_out": held_out, "rows": rows}


def _gb(x: int | None) -> str:
    return "-" if x is None else f"{x / 1e9:.2f}"


def table(result: dict[str, Any]) -> str:
    """The suite as the markdown table docs/accuracy.md quotes."""
    by_id = {c["id"]: c for c in cases()}
    lines = [
        "| case | measure | published GB | estimated GB | error | source |",
        "| --- | --- | ---: | ---: | ---: | --- |",
    ]
    for r in result["rows"]:
        source = by_id[r["id"]]["source"].split(",")[0]
        if r["pending"]:
            error = "pending"
        else:
            error = f"{r['error']:+.1%}" + (" (excluded)" if r["excluded"] else "")
        lines.append(
            f"| {r['id']} | {r['measure']} | {_gb(r['published_bytes'])} | "
            f"{_gb(r['estimated_bytes'])} | {error} | {source} |"
        )
    s = result["summary"]
    h = result["held_out"]
    lines += [
        "",
        f"{s['cases']} counted cases ({s['excluded']} excluded, reasons in "
        f"bench/accuracy/published.toml): median absolute error {s['median_abs_error']:.1%}, "
        f"worst {s['max_abs_error']:.1%}, most low {s['most_low']:+.1%}, "
        f"{s['low_by_more_than_5pct']} more than 5% low.",
    ]
    if h["cases"]:
        lines.append(
            f"Held out (issue 33): {h['cases']} counted cases ({h['excluded']} excluded, "
            f"{h['pending']} pending): median error {h['median_error']:+.1%}, median "
            f"absolute {h['median_abs_error']:.1%}, worst {h['worst_error']:+.1%}."
        )
    return "\n".join(lines) + "\n"


def _print_groups(title: str, groups: dict[str, dict[str, Any]]) -> None:
    print(title)
    for name, s in groups.items():
        print(
            f"  {name:34s} {s['cases']:3d} cases  median {s['median_error']:+7.1%}  "
            f"worst {s['worst_error']:+7.1%}"
        )


def main() -> None:
    result = run()
    for r in result["rows"]:
        if r["pending"]:
            print(f"{r['id']:48s} {r['measure']:22s} pending: {r['pending']}")
            continue
        print(
            f"{r['id']:48s} {r['measure']:22s} published {r['published_bytes'] / 1e9:7.2f} GB  "
            f"estimated {r['estimated_bytes'] / 1e9:7.2f} GB  {r['error']:+7.1%}  ({r['peak_phase']})"
            + ("  [excluded]" if r["excluded"] else "")
        )
    print(json.dumps(result["summary"]))
    held = result["held_out"]
    if held["cases"]:
        print(
            f"held out: {held['cases']} counted, {held['excluded']} excluded, "
            f"{held['pending']} pending; median {held['median_error']:+.1%}, "
            f"worst {held['worst_error']:+.1%}"
        )
        _print_groups("by source:", held["by_source"])
        _print_groups("by regime:", held["by_regime"])
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    if "--table" in sys.argv:
        print(table(result))


if __name__ == "__main__":
    main()
