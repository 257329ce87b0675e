"""The estimator at realistic sizes, against fake-tensor traces of the real models.

    python -m bench.accuracy.at_scale [NAME ...]

No CPU can take a real step of a 7B model, but a step under ``FakeTensorMode`` runs
the real Hugging Face code on tensors without storage, and torch's ``MemTracker``
accounts every allocation exactly. Each case builds a preset's config (random init,
no hub) in bf16, takes two AdamW steps (or a no-grad prefill) and compares the peak
with the estimator's ``peak_bytes`` for ``runtime: cpu`` (CPU kernels, as traced).
Writes bench/results/accuracy_at_scale.json.
"""

import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.memory.estimate import estimate
from gpuplan.core.memory.presets import presets
from gpuplan.core.memory.schema import EstimateRequest

RESULTS = Path(__file__).resolve().parent.parent / "results" / "accuracy_at_scale.json"


@dataclass(frozen=True)
class Scale:
    name: str
    preset: str
    mode: str = "training"
    batch: int = 1
    seq: int = 2048
    checkpointing: str = "none"
    layers: int | None = None
    """Fewer layers than the preset (same width) to bound the trace's time."""


CASES = [
    Scale("llama-2-7b train bf16 b1 s2048", "llama-2-7b"),
    Scale("llama-3.1-8b train bf16 ckpt b2 s4096", "llama-3.1-8b", batch=2, seq=4096, checkpointing="full"),
    Scale("mixtral-8x7b (4 layers) train bf16 b1 s1024", "mixtral-8x7b", seq=1024, layers=4),
    Scale("llama-3.1-70b (8 layers) inference bf16 b4 s4096", "llama-3.1-70b", mode="inference", batch=4, seq=4096, layers=8),
    Scale("qwen2.5-7b inference bf16 b8 s2048", "qwen2.5-7b", mode="inference", batch=8, seq=2048),
]  # fmt: skip


def _config(case: Scale) -> dict[str, Any]:
    config = dict(presets()[case.preset].config or {})
    if case.layers:
        config["num_hidden_layers"] = case.layers
    return config


def traced_peak(case: Scale) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    config = _config(case)
    hf = AutoConfig.for_model(config.pop("model_type"), **config)
    with FakeTensorMode():
        model = AutoModelForCausalLM.from_config(
            hf, dtype=torch.bfloat16, attn_implementation="sdpa"
        )
        ids = torch.randint(0, hf.vocab_size, (case.batch, case.seq))
        tracker = MemTracker()
        if case.mode == "inference":
            model.eval()
            tracker.track_external(model)
            with tracker, torch.no_grad():
                model(input_ids=ids, use_cache=True, logits_to_keep=1)
        else:
            model.train()
            if case.checkpointing == "full":
                model.gradient_checkpointing_enable()
            opt = torch.optim.AdamW(model.parameters(), foreach=False)
            tracker.track_external(model, opt)
            with tracker:
                for step in range(2):
                    if step == 1:
                        tracker.reset_mod_stats()
                    model(input_ids=ids, labels=ids).loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
    snapshot = tracker.get_tracker_snapshot("peak")
    (device,) = snapshot
    return int(snapshot[device]["Total"])


def estimated_peak(case: Scale) -> int:
    body = {
        "model": {"hf_config": _config(case)},
        "workload": {
            "mode": case.mode,
            "batch_size": case.batch,
            "sequence_length": case.seq,
            "precision": "bf16",
            "gradient_checkpointing": case.checkpointing,
        },
        "runtime": "cpu",
    }
    return estimate(msgspec.convert(body, EstimateRequest), builtin_catalog()).peak_bytes


def main() -> None:
    names = sys.argv[1:]
    rows = []
    for case in CASES:
        if names and not any(n in case.name for n in names):
            continue
        started = time.perf_counter()
        traced = traced_peak(case)
        seconds = time.perf_counter() - started
        est = estimated_peak(case)
        error = (est - traced) / traced
        rows.append({"case": case.name, "traced_bytes": traced, "estimated_bytes": est,
                     "error": error, "seconds": round(seconds, 1)})  # fmt: skip
        print(
            f"{case.name:50s} traced {traced / 2**30:8.2f} GiB  estimated {est / 2**30:8.2f} GiB  error {error:+7.2%}  ({seconds:.0f} s)",
            flush=True,
        )
    if not names:
        errors = [abs(r["error"]) for r in rows]
        summary = {"median_abs_error": statistics.median(errors), "max_abs_error": max(errors)}
        RESULTS.write_text(
            json.dumps({"torch": torch.__version__, "summary": summary, "rows": rows}, indent=2)
            + "\n"
        )


if __name__ == "__main__":
    main()
