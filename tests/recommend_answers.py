"""Recorded answers of the recommendation and the plan, to hold a faster search to the
same bytes.

    python -m tests.recommend_answers     # re-record tests/fixtures/recommend_answers/

The requests are every body of ``bench/requests.toml`` that goes through ``recommend()``
or the plan (``recommend_speed``, and ``api_overhead``'s recommendation and plan), the
plan files of ``examples/``, and more that reach other branches of the search: serving,
a given layout, MoE, vision, fp8, QLoRA, long context, FSDP1, ``all_counts``, each
objective, count and price constraints. tests/test_recommend_identical.py recomputes each answer
and compares it with its file byte for byte: a search shortcut that changes any answer
is not exact. Re-record only for a deliberate change of answers, and say so.
"""

import re
from pathlib import Path
from typing import Any

import msgspec
from bench.requests import request_set

from gpuplan.config.documents import read_document
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.ci import CiPlan, check
from gpuplan.core.convert import convert
from gpuplan.core.recommend import RecommendRequest, fit, recommend

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "tests" / "fixtures" / "recommend_answers"

TRAIN_7B = {"model": {"name": "llama-2-7b"}, "training": {"training_tokens": 1_000_000_000}}

MORE: dict[str, dict[str, Any]] = {
    "7b training energy": {
        **TRAIN_7B,
        "workload": {"mode": "training", "sequence_length": 4096},
        "objective": "energy",
    },
    "7b training balanced all counts": {
        **TRAIN_7B,
        "workload": {"mode": "training", "sequence_length": 4096},
        "all_counts": True,
    },
    "7b training batch 256 selective": {
        **TRAIN_7B,
        "workload": {
            "mode": "training",
            "sequence_length": 2048,
            "batch_size": 2,
            "gradient_checkpointing": "selective",
        },
        "training": {"training_tokens": 1_000_000_000, "global_batch_size": 256},
        "objective": "fastest",
    },
    "8b fp8 training fastest nvidia": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "training", "sequence_length": 8192, "precision": "fp8"},
        "training": {"training_tokens": 2_000_000_000},
        "objective": "fastest",
        "constraints": {"vendors": ["nvidia"]},
    },
    "8b long context 32k training": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {
            "mode": "training",
            "sequence_length": 32768,
            "gradient_checkpointing": "full",
        },
        "training": {"training_tokens": 1_000_000_000, "global_batch_tokens": 4_194_304},
        "objective": "fastest",
    },
    "8b qlora cheapest": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "finetune_qlora", "sequence_length": 2048, "batch_size": 4},
        "training": {"training_tokens": 100_000_000},
        "objective": "cheapest",
    },
    "mixtral training fastest": {
        "model": {"name": "mixtral-8x7b"},
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "gradient_checkpointing": "full",
        },
        "training": {"training_tokens": 1_000_000_000},
        "objective": "fastest",
    },
    "mixtral given layout t2 d4 e4": {
        "model": {"name": "mixtral-8x7b"},
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "gradient_checkpointing": "full",
            "gradient_accumulation_steps": 16,
            "parallelism": {"tensor": 2, "data": 4, "expert": 4, "zero_stage": 1},
        },
        "training": {"training_tokens": 1_000_000_000},
        "layout": "given",
    },
    "70b training on prem gpu counts": {
        "model": {"name": "llama-2-70b"},
        "workload": {"mode": "training", "sequence_length": 4096, "gradient_checkpointing": "full"},
        "training": {"training_tokens": 1_000_000_000},
        "objective": "balanced",
        "constraints": {"deployment": "on_prem", "gpu_counts": [8, 16, 24, 64]},
    },
    "70b training nvlink, 16 per node, comm overlap": {
        "model": {"name": "llama-2-70b"},
        "workload": {"mode": "training", "sequence_length": 4096, "gradient_checkpointing": "full"},
        "training": {"training_tokens": 1_000_000_000},
        "objective": "cheapest",
        "constraints": {
            "required_interconnect": "nvlink",
            "gpus_per_node": 16,
            "max_usd_per_hour": 500,
        },
        "efficiency": {"comm_overlap": 0.5},
    },
    "13b training mfu override, spot prices": {
        "model": {"name": "llama-2-13b"},
        "workload": {"mode": "training", "sequence_length": 4096},
        "training": {"training_tokens": 1_000_000_000},
        "objective": "cheapest",
        "efficiency": {"mfu": 0.4},
        "pricing": {"kind": "spot"},
    },
    "7b given layout zero3 dp4": {
        **TRAIN_7B,
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "batch_size": 2,
            "gradient_accumulation_steps": 4,
            "parallelism": {"data": 4, "zero_stage": 3},
        },
        "layout": "given",
        "objective": "cheapest",
    },
    "8b workload fixes the global batch, preferred gpu": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "batch_size": 2,
            "gradient_accumulation_steps": 8,
            "parallelism": {"data": 4, "zero_stage": 2},
        },
        "training": {"training_tokens": 500_000_000},
        "objective": "balanced",
        "constraints": {"preferred_gpu": "l4-24gb"},
    },
    "resnet-50 training": {
        "model": {"name": "resnet-50"},
        "workload": {"mode": "training", "batch_size": 64},
        "training": {"epochs": 90, "dataset_samples": 1_281_167},
        "objective": "cheapest",
    },
    "vit-b-16 training fastest": {
        "model": {"name": "vit-b-16"},
        "workload": {"mode": "training", "batch_size": 64},
        "training": {"samples": 10_000_000},
        "objective": "fastest",
    },
    "405b training fastest": {
        "model": {"name": "llama-3.1-405b"},
        "workload": {"mode": "training", "sequence_length": 8192, "gradient_checkpointing": "full"},
        "training": {"training_tokens": 10_000_000_000},
        "objective": "fastest",
        "constraints": {"max_gpus_per_job": 512},
    },
    "7b serving balanced": {
        "model": {"name": "llama-2-7b"},
        "workload": {"mode": "inference", "sequence_length": 2048},
        "inference": {"output_tokens": 512, "requests_per_second": 20},
    },
    "70b serving int4 ttft, energy": {
        "model": {"name": "llama-3.1-70b"},
        "workload": {
            "mode": "inference",
            "sequence_length": 4096,
            "weight_quantization": "int4",
        },
        "inference": {
            "output_tokens": 256,
            "requests_per_second": 3,
            "max_time_to_first_token_s": 2,
        },
        "objective": "energy",
    },
    "8b serving sglang tpot target, cheapest": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 4096},
        "inference": {
            "engine": "sglang",
            "output_tokens": 512,
            "requests_per_second": 10,
            "max_time_per_output_token_s": 0.03,
        },
        "objective": "cheapest",
    },
    "mixtral serving fastest all counts": {
        "model": {"name": "mixtral-8x7b"},
        "workload": {"mode": "inference", "sequence_length": 4096},
        "inference": {"output_tokens": 256, "requests_per_second": 4},
        "objective": "fastest",
        "all_counts": True,
    },
    "70b serving hybrid": {
        "model": {"name": "llama-3.1-70b"},
        "workload": {"mode": "inference", "sequence_length": 2048},
        "inference": {"output_tokens": 256, "requests_per_second": 2},
        "constraints": {"deployment": "hybrid"},
        "hybrid": {"owned_gpu": "h100-sxm5-80gb", "owned_count": 8},
    },
    "7b lora fsdp1 search, balanced": {
        "model": {"name": "llama-2-7b"},
        "workload": {
            "mode": "finetune_lora",
            "sequence_length": 4096,
            "parallelism": {"framework": "fsdp1"},
        },
        "training": {"training_tokens": 1_000_000_000},
    },
    "13b fsdp1 search without prefetch, fastest": {
        "model": {"name": "llama-2-13b"},
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "gradient_checkpointing": "full",
            "parallelism": {"framework": "fsdp1", "fsdp1": {"backward_prefetch": "none"}},
        },
        "training": {"training_tokens": 1_000_000_000},
        "objective": "fastest",
    },
    "8b fsdp1 given layout dp8": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {
            "mode": "training",
            "sequence_length": 4096,
            "gradient_accumulation_steps": 4,
            "parallelism": {"framework": "fsdp1", "data": 8},
        },
        "training": {"training_tokens": 1_000_000_000},
        "layout": "given",
    },
    "does not fit anywhere": {
        "model": {"name": "llama-3.1-405b"},
        "workload": {"mode": "training", "sequence_length": 8192},
        "training": {"training_tokens": 1_000_000_000},
        "constraints": {"max_gpus_per_job": 8},
    },
}
"""Requests beyond the benchmarks' that reach other branches of the search."""

BOUNDED: dict[str, tuple[str, int]] = {
    "bounded 70b cheapest, 12 estimates": (
        "llama-2-70b training full recompute, cheapest",
        12,
    ),
    "bounded 7b lora, 30 estimates": ("llama-2-7b LoRA, balanced", 30),
    "bounded mixtral, 25 estimates": ("mixtral-8x7b training, balanced, hybrid", 25),
}
"""Recommendations under a lower bound of estimator calls (``fit.MAX_ESTIMATES``): the
search must make the same estimates in the same order to cut off at the same ones."""


def requests() -> dict[str, RecommendRequest]:
    """Every recommendation recorded, by name."""
    bodies: dict[str, dict[str, Any]] = dict(request_set("recommend_speed"))
    for route in request_set("api_overhead"):
        if route["path"] == "/v1/recommendations" and route["body"] not in bodies.values():
            bodies[f"api_overhead {route['name']}"] = route["body"]
    bodies.update(MORE)
    return {name: msgspec.convert(body, RecommendRequest) for name, body in bodies.items()}


def plans() -> dict[str, CiPlan]:
    """Every plan recorded: the benchmark's and the example plan files."""
    out = {
        f"api_overhead {route['name']}": convert(route["body"], CiPlan)
        for route in request_set("api_overhead")
        if route["path"] == "/v1/plan"
    }
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        out[f"plan {path.stem}"] = convert(read_document(path), CiPlan)
    return out


def answers() -> dict[str, bytes]:
    """Each request's answer as indented JSON, by file name."""
    catalog = builtin_catalog()
    out = {}
    asked = requests()
    for name, request in asked.items():
        out[_file(name)] = msgspec.json.format(msgspec.json.encode(recommend(request, catalog)))
    for name, (case, bound) in BOUNDED.items():
        kept = fit.MAX_ESTIMATES
        fit.MAX_ESTIMATES = bound
        try:
            answer = recommend(asked[case], catalog)
        finally:
            fit.MAX_ESTIMATES = kept
        assert answer.search.estimates == bound, (name, answer.search.estimates)
        out[_file(name)] = msgspec.json.format(msgspec.json.encode(answer))
    for name, plan in plans().items():
        out[_file(name)] = msgspec.json.format(msgspec.json.encode(check(plan, catalog)))
    return {name: text + b"\n" for name, text in out.items()}


def _file(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".json"


def main() -> None:
    FILES.mkdir(parents=True, exist_ok=True)
    recorded = answers()
    for stale in {p.name for p in FILES.glob("*.json")} - recorded.keys():
        (FILES / stale).unlink()
    for name, text in recorded.items():
        (FILES / name).write_bytes(text)
    print(f"recorded {len(recorded)} answers in {FILES.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
