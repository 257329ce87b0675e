"""AIConfigurator's estimate of each serving case, run inside its own venv.

    /tmp/bench-aic/bin/python -m bench.peers.aic_serving < cases.json > answers.json

Imports nothing of gpuplan (AIConfigurator is a benchmark input, never a dependency):
bench/peers/serving.py builds the cases from bench/published/runs.toml and reads the
answers back. Each case names a model configuration (a Hugging Face ``config.json``
written from gpuplan's preset, so both tools see the same shape), AIConfigurator's
system, backend, mode and the run's lengths, batch and tensor parallelism.

The modes, as AIConfigurator 0.12.0 defines them (``aiconfigurator.cli.api.cli_estimate``):

- ``static``: one batch of ``batch_size`` sequences prefilled together, then decoded
  together, no in-flight batching; its TTFT is the batch's prefill, its tokens/s the
  batch's output over the request latency. The measure of a static-batch benchmark.
- ``agg``: in-flight batching with ``batch_size`` sequences in flight, a new request's
  prompt scheduled beside the decodes; its TTFT and TPOT are those of one request in
  that steady state. The measure of a closed-loop load test at concurrency ``batch_size``.
"""

import contextlib
import io
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("AICONFIGURATOR_LOG_LEVEL", "ERROR")


def _call(case: dict[str, Any], model_dir: Path, batch: int) -> Any:
    from aiconfigurator.cli.api import cli_estimate

    with contextlib.redirect_stdout(io.StringIO()):
        return cli_estimate(
            str(model_dir),
            case["system"],
            mode=case["mode"],
            backend_name=case["backend"],
            isl=case["isl"],
            osl=case["osl"],
            batch_size=batch,
            tp_size=case["tp"],
            gemm_quant_mode=case.get("gemm_quant_mode"),
            kvcache_quant_mode=case.get("kvcache_quant_mode"),
        )


def estimate(case: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """AIConfigurator's figures for one case (ms turned to s), or why it has none.

    Under load (``agg``) an engine keeps in flight only the sequences whose KV cache fits
    and queues the rest; AIConfigurator refuses such a batch ("OOM"), so it is asked again
    at half the batch until one fits (``batch_size_used``), as gpuplan caps its
    concurrency at the KV cache's capacity. A static batch is never shrunk."""
    model_dir = workdir / case["id"]
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(case["hf_config"]), encoding="utf-8")
    start = time.perf_counter()
    batch = int(case["batch_size"])
    while True:
        try:
            result = _call(case, model_dir, batch)
            break
        except Exception as exc:  # the tool refuses the case (memory, unsupported shape)
            if case["mode"] == "agg" and str(exc).startswith("OOM") and batch > 1:
                batch //= 2
                continue
            return {"id": case["id"], "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {
        "id": case["id"],
        "batch_size_used": batch,
        "ttft_s": result.ttft / 1000,
        "tpot_s": result.tpot / 1000,
        "output_tokens_per_s": result.tokens_per_second,
        "requests_per_s": result.seq_per_second,
        "backend_version": result.backend_version,
        "kv_cache_warning": result.kv_cache_warning,
        "seconds": round(time.perf_counter() - start, 2),
    }


def main() -> None:
    logging.disable(logging.WARNING)
    cases = json.load(sys.stdin)
    from importlib.metadata import version

    with tempfile.TemporaryDirectory() as tmp:
        answers = []
        for case in cases:
            answers.append(estimate(case, Path(tmp)))
            print(f"aiconfigurator: {case['id']} done", file=sys.stderr)
    json.dump(
        {
            "aiconfigurator": version("aiconfigurator"),
            "aiconfigurator_core": version("aiconfigurator-core"),
            "answers": answers,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
