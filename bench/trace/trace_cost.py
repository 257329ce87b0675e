"""What a trace costs: operator calls per layer by model type, and seconds per call.

    python -m bench.trace.trace_cost            # measure, write bench/results/trace_cost.json
    python -m bench.trace.trace_cost --toml     # also rewrite the predictor's table
                                          # (service/gpuplan/core/trace/data/cost.toml)
    python -m bench.trace.trace_cost --toml --families t5,bart,whisper
                                          # measure these types only, keep the others

A trace's time is the dispatch of every aten operator its step runs through the
recorder and the fake mode (plus building the model), and the operator count grows
with the layers. This measures, in one warm process (as a ``gpuplan worker`` is), for
each model type of ``FAMILIES`` at two depths (1 and 4 layers; an encoder-decoder's
encoder and decoder each) and four steps (training one and two steps, inference,
inference with four decode steps):

- the operator calls the recorder sees (``Recorder.__torch_dispatch__``), from which
  the calls per layer of building, of a training step, of an inference step and of a
  decode step follow by differences, and the calls outside the layers;
- the wall time, from which one least-squares fit gives seconds per operator call (of
  a training trace and of an inference trace) and a fixed cost per trace.

Then it checks the predictor (:mod:`gpuplan.core.trace.cost`, with the table just
written) on configurations it was not fitted on: real widths, 12 to 48 layers, other
steps. Each check traces in a child forked from a parent warmed up as a worker is
(:func:`gpuplan.jobs.worker.warm_up`), so the time is what a worker spends.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench.requests import request_set

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
TOML = ROOT / "service" / "gpuplan" / "core" / "trace" / "data" / "cost.toml"

SMALL = {"vocab_size": 256, "max_position_embeddings": 256}
FAMILIES: dict[str, dict[str, Any]] = {
    "llama": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2},
    "mistral": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2},
    "qwen2": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2},
    "qwen3": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16},
    "gemma": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16},
    "phi3": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "num_key_value_heads": 2, "pad_token_id": 0},
    "mixtral": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt2": {"n_embd": 64, "n_head": 4, "n_positions": 256},
    "gpt_neox": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4},
    "opt": {"hidden_size": 64, "ffn_dim": 128, "num_attention_heads": 4,
            "word_embed_proj_dim": 64},
    "falcon": {"hidden_size": 64, "num_attention_heads": 4, "new_decoder_architecture": True,
               "num_kv_heads": 2},
    "bert": {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4},
    "t5": {"d_model": 64, "d_ff": 128, "num_heads": 4, "d_kv": 16},
    "bart": {"d_model": 64, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
             "encoder_attention_heads": 4, "decoder_attention_heads": 4},
    "whisper": {"d_model": 64, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
                "encoder_attention_heads": 4, "decoder_attention_heads": 4, "pad_token_id": 0,
                "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 1},
}  # fmt: skip
"""Small configs of each model type (the depth is set per run)."""

LAYER_KEY: dict[str, tuple[str, ...]] = {
    "gpt2": ("n_layer",),
    "t5": ("num_layers", "num_decoder_layers"),
    "bart": ("encoder_layers", "decoder_layers"),
    "whisper": ("encoder_layers", "decoder_layers"),
}
"""Where each type keeps its depth; an encoder-decoder's encoder and decoder each get
the run's depth, so a run of depth d has 2d layers and a decode step runs d of them."""
ENCODER_DECODER = {family for family, keys in LAYER_KEY.items() if len(keys) == 2}
DEPTHS = (1, 4)
VARIANTS: dict[str, dict[str, Any]] = {
    "train1": {"mode": "training", "steps": 1},
    "train2": {"mode": "training", "steps": 2},
    "infer1": {"mode": "inference", "steps": 1},
    "decode4": {"mode": "inference", "steps": 1, "new_tokens": 4},
}
SHAPE = {"batch_size": 1, "sequence_length": 32}
PARALLEL: dict[str, dict[str, Any]] = {
    "fsdp": {"mode": "training", "steps": 2, "fsdp": 2},
    "tensor_parallel": {"mode": "training", "steps": 2, "tensor_parallel": 2},
    "checkpointing": {"mode": "training", "steps": 2, "gradient_checkpointing": True},
}
"""Sharded and recomputing steps (llama): their time per layer against the plain step's."""

CHECKS: list[dict[str, Any]] = request_set("trace_cost")
"""Configurations the fit never saw, at real widths and depths."""


def _counting() -> list[int]:
    """Count the operator calls the recorder dispatches (this process only)."""
    from gpuplan.trace.recorder import Recorder

    counter = [0]
    original = Recorder.__torch_dispatch__

    def counted(self: Any, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        counter[0] += 1
        return original(self, func, types, args, kwargs)

    Recorder.__torch_dispatch__ = counted  # type: ignore[method-assign]
    return counter


def _trace(config: dict[str, Any], workload: dict[str, Any], runtime: str) -> float:
    import msgspec

    from gpuplan.core.trace.schema import TraceWorkload
    from gpuplan.trace.hf import builder
    from gpuplan.trace.run import trace

    w = msgspec.convert(workload, TraceWorkload)
    started = time.perf_counter()
    trace(
        builder(config, w),
        mode="inference" if w.mode == "inference" else "training",
        optimizer=w.optimizer,
        steps=w.steps,
        amp=w.amp,
        runtime="cpu" if runtime == "cpu" else "cuda",
        new_tokens=w.new_tokens,
        probe_budget_bytes=0,
    )
    return time.perf_counter() - started


def _keys(family: str) -> tuple[str, ...]:
    return LAYER_KEY.get(family, ("num_hidden_layers",))


def measure(repeat: int, families: list[str]) -> dict[str, Any]:
    counter = _counting()
    _trace({"model_type": "llama", **SMALL, **FAMILIES["llama"], "num_hidden_layers": 1},
           {**SHAPE, **VARIANTS["train2"]}, "cuda")  # warm-up  # fmt: skip
    runs = []
    for family in families:
        extra = FAMILIES[family]
        for depth in DEPTHS:
            config = {"model_type": family, **SMALL, **extra,
                      **dict.fromkeys(_keys(family), depth)}  # fmt: skip
            for variant, workload in VARIANTS.items():
                times = []
                try:
                    for _ in range(repeat):
                        counter[0] = 0
                        times.append(_trace(config, {**SHAPE, **workload}, "cuda"))
                except Exception as exc:  # no decode for an encoder: the API refuses it too
                    print(family, depth, variant, "fails:", exc, flush=True)
                    continue
                runs.append(
                    {
                        "family": family,
                        "layers": depth,
                        "variant": variant,
                        "operators": counter[0],
                        "seconds": min(times),
                    }
                )
                print(family, depth, variant, counter[0], round(min(times), 3), flush=True)
    parallel = []
    if "llama" not in families:
        return {"runs": runs, "parallel": parallel}
    for name, workload in PARALLEL.items():
        for depth in DEPTHS:
            config = {"model_type": "llama", **SMALL, **FAMILIES["llama"],
                      "num_hidden_layers": depth}  # fmt: skip
            seconds = min(_trace(config, {**SHAPE, **workload}, "cuda") for _ in range(repeat))
            parallel.append({"parallel": name, "layers": depth, "seconds": seconds})
            print(name, depth, round(seconds, 3), flush=True)
    return {"runs": runs, "parallel": parallel}


def derive(runs: list[dict[str, Any]], parallel: list[dict[str, Any]]) -> dict[str, Any]:
    """Operator calls per layer of each part of a trace, and the time fit."""
    import numpy as np

    ops = {(r["family"], r["layers"], r["variant"]): r["operators"] for r in runs}
    low, high = DEPTHS
    families = {}
    for family in FAMILIES:
        if (family, low, "train1") not in ops:
            continue
        units = len(_keys(family))  # layers per unit of depth: 2 for an encoder-decoder

        def per_layer(variant: str, f: str = family, n: int = units) -> float:
            return (ops[f, high, variant] - ops[f, low, variant]) / ((high - low) * n)

        def fixed(variant: str, f: str = family, n: int = units) -> float:
            return ops[f, low, variant] - low * n * per_layer(variant, f)

        # train1 = build + one step; train2 = build + two steps: a step is the difference.
        train_step = per_layer("train2") - per_layer("train1")
        build = per_layer("train1") - train_step
        infer_step = per_layer("infer1") - build
        # A decode step runs the decoder alone: per decoder layer (one per unit of depth).
        decode_step = (
            units * (per_layer("decode4") - per_layer("infer1")) / 4
            if (family, low, "decode4") in ops
            else 0.0
        )
        families[family] = {
            "build_per_layer": round(build, 1),
            "training_step_per_layer": round(train_step, 1),
            "inference_step_per_layer": round(infer_step, 1),
            "decode_step_per_layer": round(decode_step, 1),
            "training_step_fixed": round(fixed("train2") - fixed("train1"), 1),
            "fixed": round(2 * fixed("train1") - fixed("train2"), 1),
            **({"encoder_decoder": True} if family in ENCODER_DECODER else {}),
        }
    # Training and inference differ in Python work per call (autograd's bookkeeping,
    # the KV cache's): one rate each, and one fixed cost, fitted together.
    training = [r["variant"].startswith("train") for r in runs]
    x = np.array(
        [
            [r["operators"] * t, r["operators"] * (not t), 1.0]
            for r, t in zip(runs, training, strict=False)
        ]
    )
    y = np.array([r["seconds"] for r in runs])
    (per_training, per_inference, intercept), *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ np.array([per_training, per_inference, intercept])
    seconds = {(r["family"], r["layers"], r["variant"]): r["seconds"] for r in runs}
    unsharded = seconds["llama", high, "train2"] - seconds["llama", low, "train2"]
    sharded = {(r["parallel"], r["layers"]): r["seconds"] for r in parallel}
    factors = {
        f"{name}_time_factor": round((sharded[name, high] - sharded[name, low]) / unsharded, 2)
        for name in PARALLEL
    }
    return {
        "families": families,
        **factors,
        "seconds_per_training_operator": float(per_training),
        "seconds_per_inference_operator": float(per_inference),
        "fixed_seconds": float(max(intercept, 0.0)),
        "fit_worst_residual_seconds": float(np.abs(residual).max()),
    }


RATES = (
    "seconds_per_training_operator",
    "seconds_per_inference_operator",
    "fixed_seconds",
    "fit_worst_residual_seconds",
)
"""The time fit's results, kept as committed when only some types are counted again."""


def write_toml(derived: dict[str, Any], machine: str) -> None:
    lines = [
        "# The trace cost predictor's table (gpuplan.core.trace.cost), measured by",
        "# `python -m bench.trace.trace_cost --toml` (bench/results/trace_cost.json):",
        f"# {machine}.",
        "# Operator calls the recorder dispatches, per decoder layer, by model type; a",
        "# trace's predicted time is their sum over its layers, steps and decode steps",
        "# times the seconds per call (a training or an inference trace's), plus fixed_seconds.",
        "",
        'source = "bench/results/trace_cost.json (python -m bench.trace.trace_cost)"',
        f"seconds_per_training_operator = {derived['seconds_per_training_operator']:.3e}",
        f"seconds_per_inference_operator = {derived['seconds_per_inference_operator']:.3e}",
        f"fixed_seconds = {derived['fixed_seconds']:.3f}",
        "# Time per layer of a sharded step (llama, rank 0 of 2) and of a step with",
        "# gradient checkpointing over the plain one's (checkpointing runs each layer's",
        "# forward again), floored at 1: a sharded step was measured no cheaper within",
        "# the noise of these short runs, and a prediction must not shrink for it.",
        *(f"{name}_time_factor = {max(1.0, derived[f'{name}_time_factor'])}" for name in PARALLEL),
        "",
    ]
    for family, row in derived["families"].items():
        lines.append(f"[families.{family}]")
        lines += [f"{key} = {json.dumps(value)}" for key, value in row.items()]
        lines.append("")
    TOML.write_text("\n".join(lines), encoding="utf-8")


def _forked(check: dict[str, Any]) -> float:
    """One trace in a child forked from this warm process: a worker's job."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        try:
            seconds = _trace(check["config"], check["workload"], check["runtime"])
        except Exception as exc:  # report and exit
            os.write(write, json.dumps({"error": repr(exc)}).encode())
            os._exit(1)
        os.write(write, json.dumps({"seconds": seconds}).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read() or "{}")
    os.waitpid(pid, 0)
    if "seconds" not in answer:
        raise RuntimeError(f"{check['name']}: {answer}")
    return float(answer["seconds"])


def validate(families: list[str] | None = None) -> list[dict[str, Any]]:
    """Predicted against measured seconds of each check (of ``families``' types only when
    given)."""
    import msgspec

    from gpuplan.core.trace import cost
    from gpuplan.core.trace.schema import TraceRequest

    cost.table.cache_clear()
    rows = []
    for check in CHECKS:
        if families is not None and check["config"]["model_type"] not in families:
            continue
        request = msgspec.convert(
            {"model": {"hf_config": check["config"]}, "workload": check["workload"],
             "runtime": check["runtime"]}, TraceRequest)  # fmt: skip
        predicted = cost.predict(request)
        measured = _forked(check)
        rows.append(
            {
                "name": check["name"],
                "predicted_seconds": round(predicted.seconds, 2),
                "measured_seconds": round(measured, 2),
                "operators": predicted.operators,
                "ratio": round(predicted.seconds / measured, 3),
            }
        )
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--toml", action="store_true", help="rewrite the predictor's table")
    parser.add_argument("--repeat", type=int, default=2, help="runs per point (the fastest)")
    parser.add_argument(
        "--checks-only", action="store_true", help="check the committed table, measure nothing"
    )
    parser.add_argument(
        "--families",
        help="measure these model types only (comma-separated), keeping the committed "
        "results' runs of the others",
    )
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    load = os.getloadavg()
    machine = (
        f"{os.cpu_count()}-core {platform.machine()} shared VM, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, load {load[0]:.1f}"
    )
    if args.checks_only:
        previous = json.loads((RESULTS / "trace_cost.json").read_text())
        measured = {"runs": previous["runs"], "parallel": previous["parallel"]}
    chosen: list[str] = args.families.split(",") if args.families else []
    previous = json.loads((RESULTS / "trace_cost.json").read_text()) if chosen else {}
    if args.checks_only:
        previous = json.loads((RESULTS / "trace_cost.json").read_text())
        measured = {"runs": previous["runs"], "parallel": previous["parallel"]}
    elif chosen:
        # Count these types' operator calls only (a count does not depend on the
        # machine's load); every other type's runs, the sharded steps and the seconds
        # per call are kept from the committed results.
        fresh = measure(args.repeat, chosen)
        kept = [r for r in previous["runs"] if r["family"] not in chosen]
        measured = {"runs": kept + fresh["runs"], "parallel": previous["parallel"]}
        machine = f"{previous['machine']}; {', '.join(chosen)} counted on {machine}"
    else:
        measured = measure(args.repeat, list(FAMILIES))
    derived = derive(measured["runs"], measured["parallel"])
    if chosen:
        for name in RATES:
            derived[name] = previous[name]
    if args.toml:
        write_toml(derived, machine)
    from gpuplan.jobs.worker import warm_up

    warm_up()  # the parent warms up as a worker does, then each check forks
    if chosen:
        # The other checks' predictions did not change: their committed rows stand.
        fresh_checks = {row["name"]: row for row in validate(chosen)}
        names = [check["name"] for check in CHECKS]
        previous_checks = {row["name"]: row for row in previous["checks"]}
        checks = [fresh_checks.get(name) or previous_checks[name] for name in names]
    else:
        checks = validate()
    ratios = [row["ratio"] for row in checks]
    result = {
        "machine": machine,
        "python": platform.python_version(),
        "load_average": list(load),
        **derived,
        "runs": measured["runs"],
        "parallel": measured["parallel"],
        "checks": checks,
        "check_median_ratio": statistics.median(ratios),
        "check_min_ratio": min(ratios),
        "check_max_ratio": max(ratios),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "trace_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    sys.stdout.write(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2) + "\n")


if __name__ == "__main__":
    main()
