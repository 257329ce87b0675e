"""AIConfigurator beside gpuplan on the published serving runs it covers.

    sh bench/peers/setup_aiconfigurator.sh            # its own venv, /tmp/bench-aic
    PYTHONPATH=service:. .venv/bin/python -m bench.peers.serving   # writes the results
    PYTHONPATH=service:. .venv/bin/python -m bench.peers.serving --reuse  # ask only for runs without an answer
    PYTHONPATH=service:. .venv/bin/python -m bench.peers.serving --gpuplan-only
                                  # gpuplan's side again (after a refit), AIConfigurator's kept

NVIDIA's AIConfigurator (0.12.0, Apache-2.0) estimates serving from per-kernel latencies
measured on each GPU and engine (GEMM, attention, NCCL tables in ``aiconfigurator-core``).
gpuplan estimates it from a roofline with fitted efficiencies. Both are given the same
configuration of every run of bench/published/runs.toml that AIConfigurator can take:

- the GPU has AIConfigurator tables (A100 SXM 80 GB, H100 SXM, H200 SXM, B200, L40S;
  not A100 40 GB, whose memory is slower than the 80 GB part's tables, nor A10, RTX or
  AMD parts);
- the model is one of gpuplan's Llama-shaped presets, handed to both as the same
  ``config.json`` (AIConfigurator has no MPT or BLOOM family);
- the same lengths, tensor parallelism, precision (fp8 weights and KV cache where the
  run had them) and batch: a static batch (``workload.batch_size`` > 1, or one request
  at a time) is AIConfigurator's ``static`` mode with that batch; a load test at a
  concurrency is its ``agg`` mode (in-flight batching) with that many sequences in
  flight; where the run does not state its concurrency (an offline run), both use the
  concurrency gpuplan's plan chose.
- the engine the run used where AIConfigurator has it (vLLM, SGLang, TensorRT-LLM); a
  C++ engine with fused kernels that it does not have (LMDeploy TurboMind,
  FasterTransformer) is given ``trtllm``, the nearest.

gpuplan's figure is given twice: in-sample (the shipped constants) and cross-validated
(the model refitted without the run's source, from bench/results/speed_cv.json), the
figure to compare: AIConfigurator was not fitted to these runs either.

Writes bench/results/peers_serving.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import msgspec

from bench.published.runs import error, load
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "results" / "peers_serving.json"
SPEED_CV = ROOT / "bench" / "results" / "speed_cv.json"
MODELS = ROOT / "service" / "gpuplan" / "core" / "memory" / "data" / "models.toml"
DEFAULT_PYTHON = "/tmp/bench-aic/bin/python"

SYSTEMS = {
    "a100-sxm4-80gb": "a100_sxm",
    "h100-sxm5-80gb": "h100_sxm",
    "h200-sxm-141gb": "h200_sxm",
    "b200-180gb": "b200_sxm",
    "l40s-48gb": "l40s",
}
"""gpuplan's GPU id -> AIConfigurator's system with measured tables for it."""

ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}

BACKEND_BY_SOURCE = {
    "sglang-v0.3.0-vs-vllm-v0.6.0": "sglang",
    "nvidia-nim-llm-benchmarking": "trtllm",
    "mlperf-inference-v4.1-nvidia": "trtllm",
    "lmdeploy-v0.1.0-a100-fp16": "trtllm",
    "databricks-blog-2023-inference-best-practices": "trtllm",
}
"""The engine each source ran, as AIConfigurator's backend (default ``vllm``): NIM and
MLPerf NVIDIA run TensorRT-LLM; LMDeploy's TurboMind and FasterTransformer are C++
engines with fused kernels, nearest to TensorRT-LLM."""


class NotCovered(Exception):
    """AIConfigurator cannot take this run (says why)."""


def _plan(run: dict[str, Any]) -> Any:
    response = recommend(msgspec.convert(run["request"], RecommendRequest), builtin_catalog())
    return response.recommendations[0] if response.recommendations else None


def case_for(run: dict[str, Any], presets: dict[str, Any]) -> dict[str, Any]:
    """The AIConfigurator case of ``run`` (the same configuration gpuplan is given)."""
    request = run["request"]
    system = SYSTEMS.get(run["gpu"])
    if system is None:
        raise NotCovered(f"no AIConfigurator tables for {run['gpu']}")
    name = request["model"].get("name")
    if name is None or name not in presets:
        raise NotCovered("model given as a GPT-2 style config: no such AIConfigurator family")
    config = dict(presets[name]["config"])
    if config["model_type"] not in ARCHITECTURES:
        raise NotCovered(f"model family {config['model_type']}")
    workload, inference = request["workload"], request.get("inference", {})
    precision = workload.get("precision", "bf16")
    config |= {
        "architectures": [ARCHITECTURES[config["model_type"]]],
        "torch_dtype": "float16" if precision == "fp16" else "bfloat16",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0 if config["vocab_size"] > 100_000 else 10000.0,
    }
    batch = int(workload.get("batch_size", 1))
    concurrency = inference.get("max_concurrency")
    if batch > 1 or concurrency == 1:
        mode, sequences, chosen = "static", batch, "the run's static batch"
    elif concurrency:
        mode, sequences, chosen = "agg", int(concurrency), "the run's concurrency"
    else:
        plan = _plan(run)
        if plan is None or plan.latency is None:
            raise NotCovered("gpuplan has no plan to take the concurrency from")
        mode, sequences = "agg", int(plan.latency.concurrency)
        chosen = "the concurrency gpuplan's plan chose (the run does not state one)"
    case = {
        "id": run["id"],
        "hf_config": config,
        "system": system,
        "backend": BACKEND_BY_SOURCE.get(run["source_id"], "vllm"),
        "mode": mode,
        "isl": int(inference.get("prompt_tokens", workload["sequence_length"])),
        "osl": int(inference.get("output_tokens", workload["max_new_tokens"])),
        "batch_size": sequences,
        "batch_from": chosen,
        "tp": int(workload.get("parallelism", {}).get("tensor", 1)),
    }
    if workload.get("weight_quantization") == "fp8" or precision == "fp8":
        case["gemm_quant_mode"] = "fp8"
    if workload.get("kv_cache_dtype") == "fp8":
        case["kvcache_quant_mode"] = "fp8"
    return case


def ask_aiconfigurator(cases: list[dict[str, Any]], python: str) -> dict[str, Any]:
    """Run bench.peers.aic_serving in AIConfigurator's venv on ``cases``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AICONFIGURATOR_LOG_LEVEL": "ERROR"}
    done = subprocess.run(
        [python, "-m", "bench.peers.aic_serving"],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
        env=env,
        cwd=ROOT,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median absolute error of each tool on the runs both answered, overall and by
    measure and by mode (static batch or steady state under load)."""

    def block(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        both = [r for r in chosen if r["aic_error"] is not None and r["cv_error"] is not None]
        return {
            "runs": len(both),
            "aiconfigurator": _median([abs(r["aic_error"]) for r in both]),
            "gpuplan_cross_validated": _median([abs(r["cv_error"]) for r in both]),
            "gpuplan_in_sample": _median([abs(r["in_sample_error"]) for r in both]),
            "aiconfigurator_closer": sum(abs(r["aic_error"]) < abs(r["cv_error"]) for r in both),
        }

    return {
        "all": block(rows),
        "by_measure": {
            m: block([r for r in rows if r["measure"] == m])
            for m in sorted({r["measure"] for r in rows})
        },
        "by_mode": {
            m: block([r for r in rows if r["mode"] == m]) for m in sorted({r["mode"] for r in rows})
        },
        "by_source": {
            s: block([r for r in rows if r["source_id"] == s])
            for s in sorted({r["source_id"] for r in rows})
        },
    }


def reuse(
    previous: dict[str, Any], cases: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """AIConfigurator's answers a previous results file recorded for ``cases`` (the same
    mode and batch, answered), and the cases it has none for."""
    rows = {r["id"]: r for r in previous["rows"]}
    answers, missing = [], []
    for case in cases:
        row = rows.get(case["id"])
        if (
            row is None
            or (row["mode"], row["batch_size"]) != (case["mode"], case["batch_size"])
            or row["aiconfigurator"] is None
        ):
            missing.append(case)
            continue
        answer = {"id": case["id"], row["measure"]: row["aiconfigurator"]}
        answer["kv_cache_warning"] = row["aic_kv_cache_warning"]
        answer["backend_version"] = row["aic_backend_version"]
        answer["batch_size_used"] = row.get("aic_batch_size_used")
        answers.append(answer)
    return answers, missing


def evaluate(python: str | None, previous: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both tools on every covered run: AIConfigurator run in its venv (``python``), or its
    answers reused from ``previous``."""
    presets = tomllib.loads(MODELS.read_text(encoding="utf-8"))["models"]
    runs = load("inference")
    cases, skipped = [], []
    for run in runs:
        try:
            cases.append(case_for(run, presets))
        except NotCovered as why:
            skipped.append({"id": run["id"], "why": str(why)})
    if previous is None:
        assert python is not None
        answers = ask_aiconfigurator(cases, python)
    else:
        kept, missing = reuse(previous, cases)
        answers = {**previous["versions"], "answers": kept}
        if missing and python is None:
            names = ", ".join(c["id"] for c in missing)
            raise SystemExit(
                f"no AIConfigurator answer recorded for {names}: run without --gpuplan-only"
            )
        if missing:
            asked = ask_aiconfigurator(missing, str(python))
            answers["answers"] += asked["answers"]
    # Read after AIConfigurator's minutes, so that a cross-validation written meanwhile counts.
    cv_rows = {r["id"]: r for r in json.loads(SPEED_CV.read_text(encoding="utf-8"))["rows"]}
    by_id = {a["id"]: a for a in answers["answers"]}
    by_run = {r["id"]: r for r in runs}
    rows = []
    for case in cases:
        run, answer = by_run[case["id"]], by_id[case["id"]]
        measured = float(run["value"])
        aic = answer.get(run["measure"])
        cv = cv_rows.get(run["id"])
        rows.append(
            {
                "id": run["id"],
                "source_id": run["source_id"],
                "gpu": run["gpu"],
                "gpus": run["gpus"],
                "measure": run["measure"],
                "measured": measured,
                "mode": case["mode"],
                "batch_size": case["batch_size"],
                "batch_from": case["batch_from"],
                "backend": case["backend"],
                "aiconfigurator": aic,
                "aic_error": error(aic, measured),
                "aic_failure": answer.get("error"),
                "aic_kv_cache_warning": answer.get("kv_cache_warning"),
                "aic_backend_version": answer.get("backend_version"),
                "aic_batch_size_used": answer.get("batch_size_used"),
                "in_sample_error": None if cv is None else cv["in_sample_error"],
                "cv_error": None if cv is None else cv["cv_error"],
                "gpuplan_cross_validated": None if cv is None else measured * (1 + cv["cv_error"]),
            }
        )
    return {
        "benchmark": "peers_serving",
        "method": "each covered serving run of bench/published/runs.toml given to AIConfigurator "
        "and gpuplan in the same configuration; gpuplan's figure cross-validated "
        "(leave-one-source-out, bench/results/speed_cv.json), in-sample beside it",
        "versions": {
            "aiconfigurator": answers["aiconfigurator"],
            "aiconfigurator_core": answers["aiconfigurator_core"],
        },
        "serving_runs": len(runs),
        "covered": len(cases),
        "not_covered": skipped,
        "rows": rows,
        "summary": summarize(rows),
    }


def report(result: dict[str, Any]) -> str:
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.1%}"

    lines = [f"{'run':<52} {'measure':<20} {'mode':<6} {'AIC':>8} {'gpuplan cv':>10}"]
    for r in result["rows"]:
        lines.append(
            f"{r['id']:<52} {r['measure']:<20} {r['mode']:<6} {pct(r['aic_error']):>8} "
            f"{pct(r['cv_error']):>10}"
        )
    s = result["summary"]
    for label, block in [("all", s["all"])] + [
        (f"{k} {v}", b) for k in ("by_measure", "by_mode") for v, b in s[k].items()
    ]:
        lines.append(
            f"{label:<40} {block['runs']:>3} runs  AIConfigurator "
            f"{(block['aiconfigurator'] or 0):.1%}  gpuplan cv "
            f"{(block['gpuplan_cross_validated'] or 0):.1%} (in-sample "
            f"{(block['gpuplan_in_sample'] or 0):.1%})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--aic-python", default=os.environ.get("BENCH_AIC_PYTHON", DEFAULT_PYTHON))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--gpuplan-only",
        action="store_true",
        help="refresh gpuplan's side (after a refit) and reuse AIConfigurator's answers from --out",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="keep AIConfigurator's answers recorded in --out, ask it only for the runs without one",
    )
    args = parser.parse_args()
    if args.gpuplan_only or args.reuse:
        previous = json.loads(args.out.read_text(encoding="utf-8"))
        result = evaluate(None if args.gpuplan_only else args.aic_python, previous)
    else:
        if not Path(args.aic_python).exists():
            sys.exit(
                f"{args.aic_python} not found: run `sh bench/peers/setup_aiconfigurator.sh` first"
            )
        result = evaluate(args.aic_python)
    print(report(result))
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
