"""Check ``--runtime cuda`` against a real GPU: traced vs ``torch.cuda`` peaks.

    python -m bench.trace.trace_cuda_check          # on a machine with an NVIDIA GPU

For each target (the exactness-test models and a few Hugging Face shapes), the same
build function runs twice: traced on fake CPU tensors with runtime cuda (allocator
replay, workspaces), and for real on the GPU through the same step driver, reading
``torch.cuda.max_memory_allocated`` for the last step and ``memory_reserved`` at its
end. Writes bench/results/trace_cuda.json, the fixture docs/trace.md cites. Refuses
to run without CUDA; no result of it is committed until a GPU has run it.
"""

import json
import platform
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from tests.trace_targets import models

from gpuplan.core.trace.log import Phase
from gpuplan.trace.run import trace, unpack
from gpuplan.trace.step import make_optimizer, run_steps

RESULTS = Path(__file__).resolve().parents[1] / "results"

LLAMA_MEDIUM = dict(
    models.LLAMA,
    vocab_size=32000,
    hidden_size=1024,
    intermediate_size=2816,
    num_hidden_layers=8,
    num_attention_heads=16,
    num_key_value_heads=4,
    max_position_embeddings=4096,
)


def _hf_medium(dtype: torch.dtype) -> Callable[[], Any]:
    def build() -> Any:
        from transformers import AutoConfig, AutoModelForCausalLM

        values: dict[str, Any] = dict(LLAMA_MEDIUM)
        hf = AutoConfig.for_model(str(values.pop("model_type")), **values)
        model = AutoModelForCausalLM.from_config(hf, dtype=dtype)  # type: ignore[no-untyped-call]
        ids = torch.randint(0, hf.vocab_size, (4, 1024))
        return model, {"input_ids": ids, "labels": ids}

    return build


TARGETS: dict[str, Callable[[], Any]] = {
    "mlp": models.mlp,
    "cnn": models.cnn,
    "transformer": models.transformer,
    "checkpointed": models.checkpointed,
    "hf_llama": models.hf_llama,
    "hf_mixtral_bf16": models.hf_mixtral_bf16,
    "llama_medium_fp32": _hf_medium(torch.float32),
    "llama_medium_bf16": _hf_medium(torch.bfloat16),
}


def real(build: Callable[[], Any]) -> dict[str, int]:
    """Real peaks of a fresh process (its first matmuls allocate the cuBLAS workspaces)."""

    @contextmanager
    def marks(phase: Phase, measured: bool) -> Iterator[None]:
        if measured and phase == Phase.FORWARD:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        yield

    with torch.device("cuda"):
        model, inputs, loss_fn = unpack(build())
    opt = make_optimizer("adamw", model)  # torch's CUDA default: foreach
    run_steps(model, inputs, loss_fn=loss_fn, optimizer=opt, steps=2, marks=marks)
    torch.cuda.synchronize()
    return {
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "memory_reserved": torch.cuda.memory_reserved(),
    }


def one(key: str) -> dict[str, Any]:
    target = TARGETS[key]
    arch = "hopper" if torch.cuda.get_device_capability()[0] >= 9 else "ampere"

    def build() -> Any:
        torch.manual_seed(0)
        return target()

    traced = trace(build, runtime="cuda", gpu_architecture=arch)
    measured = real(build)
    return {
        "target": key,
        "traced_peak_bytes": traced.peak_bytes,
        "traced_reserved_bytes": traced.reserved_bytes,
        **measured,
        "allocated_error": (traced.peak_bytes - measured["max_memory_allocated"])
        / measured["max_memory_allocated"],
        "reserved_error": (traced.reserved_bytes - measured["memory_reserved"])
        / measured["memory_reserved"],
    }


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this check needs an NVIDIA GPU")
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2])))
        return
    name = torch.cuda.get_device_name()
    rows = []
    for key in TARGETS:
        out = subprocess.run(
            [sys.executable, "-m", "bench.trace.trace_cuda_check", "--one", key],
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            rows.append({"target": key, "error": out.stderr[-2000:]})
            print(key, "failed", out.stderr[-500:], flush=True)
            continue
        row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
        _write(name, rows)  # after each target: a run cut short keeps what it measured


def _write(name: str, rows: list[dict[str, Any]]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "trace_cuda.json").write_text(
        json.dumps(
            {
                "gpu": name,
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "machine": platform.machine(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
