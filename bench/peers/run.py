"""The peers' answers next to gpuplan's, on the accuracy suite's measured training peaks.

    /tmp/bench-peers/bin/python -m bench.peers.run [--out FILE]   (after bench/peers/setup.sh)

Runs inside the peers' venv (``bench/peers/setup.sh``), never gpuplan's: the peers are
benchmark inputs, not dependencies. For every training case of bench/accuracy/cases.py
with an Adam-family optimizer, no LoRA and a committed measurement in
bench/results/accuracy.json, each tool is given what it can take of the same job and
asked for its total; its answer is compared with the measured peak of the real step.

What each tool models (so that its error is read for what it is):

- gpuplan (``estimate``, runtime cpu): weights, gradients, optimizer state, activations
  and temporaries of each phase of the step; peak over phases.
- llm-analysis (cli99, ``LLMAnalysis.training``): weights + gradients + optimizer state +
  activations (Korthikanti et al.'s per-layer formulas) of a decoder transformer, summed;
  given the layer shapes, GQA, gated MLP, eager vs flash attention, micro-batch and
  sequence length, weight/activation bits and optimizer bytes that match the case.
- accelerate ``estimate-memory`` (``gather_data`` on a local config directory, hub check
  bypassed): parameter bytes of ``AutoModel`` (the base model, no LM head) and its "Training
  using Adam" figure: 4x the fp32 weights (float32) or 2x (its mixed precision); no
  activations, batch or sequence.
- DeepSpeed ``estimate_zero{2,3}_model_states_mem_needs`` via ``model_to_params`` (what the
  ``_all_live`` helpers compute before printing), one GPU, no offload: model states of
  fp16 mixed-precision Adam (2 + 18 bytes per parameter; ZeRO-3 adds the largest layer);
  no activations.
"""

import argparse
import contextlib
import io
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "results"
ADAM = ("adam", "adamw")
GATED = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "mixtral", "qwen2_moe"}


class Unsupported(Exception):
    """The tool cannot take this job's inputs; the case is left out of its column."""


def _timed(fn: Any, budget_s: float = 0.3, most: int = 200) -> tuple[Any, float]:
    """``fn()``'s answer and its median wall µs over as many calls as fit ``budget_s``."""
    answer = fn()
    times = []
    deadline = time.perf_counter() + budget_s
    while len(times) < most and (not times or time.perf_counter() < deadline):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return answer, statistics.median(times) * 1e6


def _hf_config(case: Any) -> Any:
    from transformers import AutoConfig

    values = dict(case.config)
    return AutoConfig.for_model(values.pop("model_type"), **values)


def gpuplan_answer(case: Any) -> tuple[int, float]:
    from bench.accuracy.run import request_for
    from gpuplan.core.catalog import builtin_catalog
    from gpuplan.core.memory.estimate import estimate

    catalog = builtin_catalog()
    request = request_for(case)
    result, us = _timed(lambda: estimate(request, catalog))
    return result.peak_bytes, us


def llm_analysis_answer(case: Any) -> tuple[int, float]:
    from llm_analysis.analysis import ActivationRecomputation, LLMAnalysis
    from llm_analysis.config import DtypeConfig, ModelConfig, get_gpu_config_by_name

    if case.precision not in ("bf16", "fp16"):
        # Its DtypeConfig takes 4, 8 or 16-bit weights and activations only.
        raise Unsupported(f"{case.precision} weights (llm-analysis takes 4/8/16-bit only)")
    hf = _hf_config(case)
    experts = getattr(hf, "num_local_experts", None) or getattr(hf, "num_experts", None) or 1
    ffn = getattr(hf, "intermediate_size", None) or getattr(hf, "ffn_dim", None)
    ffn = ffn or getattr(hf, "n_inner", None) or 4 * hf.hidden_size
    model = ModelConfig(
        name=case.name,
        num_layers=hf.num_hidden_layers,
        n_head=hf.num_attention_heads,
        hidden_dim=hf.hidden_size,
        vocab_size=hf.vocab_size,
        max_seq_len=case.seq,
        num_key_value_heads=getattr(hf, "num_key_value_heads", None) or hf.num_attention_heads,
        ffn_embed_dim=ffn,
        expansion_ratio=ffn / hf.hidden_size,
        model_type=case.config["model_type"],
        moe_num_experts=experts,
        moe_top_k=getattr(hf, "num_experts_per_tok", 1) if experts > 1 else 1,
    )
    # Weights in the case's storage dtype, activations in its compute dtype; Adam's m and
    # v in the weights' dtype (torch keeps them so): other_op_bytes + master = 2 x weight
    # bytes, and gradients (sized by master_weights_dtype_bytes) in the weights' dtype.
    weight_bits = act_bits = 16
    dtype = DtypeConfig(
        name=f"w{weight_bits}a{act_bits}e{weight_bits}",
        weight_bits=weight_bits,
        activation_bits=act_bits,
        embedding_bits=weight_bits,
    )
    analysis = LLMAnalysis(model, get_gpu_config_by_name("a100-sxm-80gb"), dtype)
    weight_bytes = weight_bits // 8
    recompute = (
        ActivationRecomputation.FULL
        if case.checkpointing == "full"
        else ActivationRecomputation.NONE
    )

    def call() -> int:
        summary = analysis.training(
            batch_size_per_gpu=case.batch,
            gradient_accumulation_steps=case.accumulation,
            seq_len=case.seq,
            activation_recomputation=recompute,
            master_weights_dtype_bytes=weight_bytes,
            other_op_bytes=weight_bytes,
            layernorm_dtype_bytes=act_bits // 8,
            flash_attn=case.attention == "sdpa",
            mlp_gated_linear_units=case.config["model_type"] in GATED,
        )
        return int(summary["(weight+op_state+grad+act)_memory_per_gpu"])

    return _timed(call)


def accelerate_answer(case: Any) -> tuple[int, float]:
    import accelerate.commands.estimate as est

    hf = _hf_config(case)
    folder = tempfile.mkdtemp(prefix="bench-peers-")
    hf.save_pretrained(folder)
    config = json.loads((Path(folder) / "config.json").read_text())
    # Offline: the hub lookup would fail; answer it with the local config's metadata.
    est.verify_on_hub = lambda repo, token=None: SimpleNamespace(
        library_name="transformers", config=config
    )
    dtype = "float32" if case.precision == "fp32" else "float16"  # float16 = its mixed precision
    args = SimpleNamespace(
        model_name=folder, library_name="transformers", dtypes=[dtype], trust_remote_code=False
    )

    def call() -> int:
        with contextlib.redirect_stdout(io.StringIO()):
            row = est.gather_data(args)[0]
        return int(max(row[3].values()))  # its CLI's "Training using Adam"

    return _timed(call)


def deepspeed_answers(case: Any) -> dict[str, tuple[int, float]]:
    import torch
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage3 import model_to_params as params3
    from deepspeed.runtime.zero.stage_1_and_2 import (
        estimate_zero2_model_states_mem_needs,
        model_to_params,
    )
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    hf = _hf_config(case)
    masked = case.config["model_type"] in ("bert", "roberta")
    cls = AutoModelForMaskedLM if masked else AutoModelForCausalLM
    model = cls.from_config(hf, dtype=torch.float32)  # real tensors: it dedups by data_ptr

    def zero2() -> int:
        return estimate_zero2_model_states_mem_needs(model_to_params(model), 1, 1, False)[1]

    def zero3() -> int:
        total, largest = params3(model)
        return estimate_zero3_model_states_mem_needs(total, largest, 1, 1, False, False)[1]

    return {"deepspeed_zero2": _timed(zero2), "deepspeed_zero3": _timed(zero3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "peers.json")
    parser.add_argument("--limit", type=int, default=0, help="first N cases only (0: all)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # llm-analysis logs every figure at INFO/WARNING

    from bench.accuracy.cases import GRID

    measured = {r["case"]: r for r in json.loads((RESULTS / "accuracy.json").read_text())["rows"]}
    cases = [c for c in GRID if c.mode == "training" and c.optimizer in ADAM and c.name in measured]
    if args.limit:
        cases = cases[: args.limit]
    tools: dict[str, Any] = {
        "gpuplan": gpuplan_answer,
        "llm-analysis": llm_analysis_answer,
        "accelerate": accelerate_answer,
    }
    versions: dict[str, str | None] = {}
    for name, module in (
        ("llm-analysis", "llm_analysis"),
        ("accelerate", "accelerate"),
        ("deepspeed", "deepspeed"),
    ):
        try:
            from importlib.metadata import version

            __import__(module)
            versions[name] = version(name)
        except Exception as error:  # a peer that does not install or import is reported
            versions[name] = None
            print(f"{name}: unavailable ({error})", file=sys.stderr)
    rows = []
    for case in cases:
        real = measured[case.name]["measured_bytes"]
        row: dict[str, Any] = {"case": case.name, "measured_bytes": real, "answers": {}}
        answers: dict[str, tuple[int, float]] = {}
        for tool, fn in tools.items():
            if tool != "gpuplan" and not versions.get(tool):
                continue
            try:
                answers[tool] = fn(case)
            except Unsupported as why:
                row["answers"][tool] = {"unsupported": str(why)}
            except Exception as error:
                row["answers"][tool] = {"error": f"{type(error).__name__}: {error}"[:200]}
        if versions.get("deepspeed"):
            try:
                answers.update(deepspeed_answers(case))
            except Exception as error:
                row["answers"]["deepspeed"] = {"error": f"{type(error).__name__}: {error}"[:200]}
        for tool, (answer, us) in answers.items():
            row["answers"][tool] = {
                "bytes": answer,
                "error": (answer - real) / real,
                "us_per_call": round(us, 1),
            }
        rows.append(row)
        print(
            f"{case.name:32s} "
            + "  ".join(
                f"{t} {a['error']:+.1%}" if isinstance(a.get("error"), float) else f"{t} n/a"
                for t, a in row["answers"].items()
            ),
            flush=True,
        )
    summary: dict[str, Any] = {}
    for tool in ["gpuplan", "llm-analysis", "accelerate", "deepspeed_zero2", "deepspeed_zero3"]:
        ok = [r["answers"][tool] for r in rows if "bytes" in r["answers"].get(tool, {})]
        if not ok:
            continue
        errors = [abs(a["error"]) for a in ok]
        summary[tool] = {
            "cases": len(ok),
            "median_abs_error": statistics.median(errors),
            "max_abs_error": max(errors),
            "within_10pct": sum(e <= 0.10 for e in errors),
            "underestimates": sum(a["error"] < 0 for a in ok),
            "median_us_per_call": statistics.median(a["us_per_call"] for a in ok),
            # gpuplan on exactly the cases this tool answered, for a like-for-like read
            "gpuplan_median_abs_error_same_cases": statistics.median(
                abs(r["answers"]["gpuplan"]["error"])
                for r in rows
                if "bytes" in r["answers"].get(tool, {}) and "bytes" in r["answers"]["gpuplan"]
            ),
        }
    result = {
        "benchmark": "peers",
        "versions": versions,
        "python": sys.version.split()[0],
        "cases": len(rows),
        "summary": summary,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
