"""Parse the launch commands a serving plan emits with each engine's own argument parser.

The engines are no dependency of gpuplan: run this in a scratch environment where the
engine's package is installed (it needs no GPU), with gpuplan's source on the path::

    python3 -m venv /tmp/v && /tmp/v/bin/pip install torch==2.13.0 \
        && /tmp/v/bin/pip install --no-deps vllm==0.34.0   # then its import-time deps
    VLLM_TARGET_DEVICE=cpu PYTHONPATH=service /tmp/v/bin/python -m bench.engines.flags vllm
    PYTHONPATH=service /tmp/s/bin/python -m bench.engines.flags sglang

Each command is parsed as the engine's CLI parses it (vLLM: the ``serve`` subcommand's
parser, ``make_arg_parser``; SGLang: ``ServerArgs.add_cli_args``), and every value the
plan relied on must come back as the plan set it. Prints one JSON line per command and
exits 1 on a mismatch. CI checks the flag names without the engines
(tests/test_engine_flags.py); this is the stronger check where a package installs.
"""

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import msgspec

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.schema import Launch

CASES: list[dict[str, Any]] = [
    {"gpu": "h100-sxm5-80gb", "model": "llama-3.1-70b", "inference": {}},
    {"gpu": "a100-sxm4-80gb", "model": "llama-3.1-8b", "inference": {"max_model_len": "auto"}},
    {
        "gpu": "l4-24gb",
        "model": "llama-3.1-8b",
        "inference": {"memory_fraction": 0.85, "max_batched_tokens": 4096},
        "kv_cache_dtype": "fp8",
    },
]


def launches(engine: str) -> list[Launch]:
    """The top candidate's launch for each case, under ``engine``."""
    out = []
    for case in CASES:
        body = {
            "model": {"name": case["model"]},
            "workload": {
                "mode": "inference",
                "sequence_length": 2048,
                "kv_cache_dtype": case.get("kv_cache_dtype", "auto"),
            },
            "inference": {
                "prompt_tokens": 2048,
                "output_tokens": 512,
                "engine": engine,
                **case["inference"],
            },
            "constraints": {"include": [case["gpu"]]},
        }
        answer = recommend(msgspec.convert(body, RecommendRequest), builtin_catalog())
        launch = answer.recommendations[0].launch
        assert launch is not None
        out.append(launch)
    return out


def vllm_values(command: list[str]) -> dict[str, Any]:
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(parser.add_subparsers(dest="subcommand"))
    ns = parser.parse_args(command[1:])
    return {
        "model": ns.model_tag,
        "tensor_parallel": ns.tensor_parallel_size,
        "memory_fraction": ns.gpu_memory_utilization,
        "max_model_len": ns.max_model_len,
        "max_concurrency": ns.max_num_seqs,
        "token_budget": ns.max_num_batched_tokens,
    }


def sglang_values(command: list[str]) -> dict[str, Any]:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang.launch_server")
    ServerArgs.add_cli_args(parser)
    ns = parser.parse_args(command[3:])
    return {
        "model": ns.model_path,
        "tensor_parallel": ns.tp_size,
        "memory_fraction": ns.mem_fraction_static,
        "max_model_len": ns.context_length,
        "max_concurrency": ns.max_running_requests,
        "token_budget": ns.chunked_prefill_size,
        "mixed_chunk": ns.enable_mixed_chunk,
    }


PARSERS = {"vllm": vllm_values, "sglang": sglang_values}
PARSER_NAMES = {
    "vllm": "vllm.entrypoints.cli.serve.ServeSubcommand().subparser_init (make_arg_parser)",
    "sglang": "sglang.srt.server_args.ServerArgs.add_cli_args",
}


RESULTS = Path(__file__).resolve().parents[1] / "results" / "engine_flags.json"


def main() -> int:
    """``python -m bench.engines.flags ENGINE [--write]``: ``--write`` records the run in
    bench/results/engine_flags.json under the engine's name."""
    engine = sys.argv[1] if len(sys.argv) > 1 else "vllm"
    parse = PARSERS[engine]
    failed = 0
    cases = []
    for launch in launches(engine):
        got = parse(launch.command)
        want = {
            "tensor_parallel": launch.tensor_parallel,
            "memory_fraction": launch.memory_fraction,
            "max_model_len": launch.max_model_len,
            "max_concurrency": launch.max_concurrency,
        }
        wrong = {k: (got[k], v) for k, v in want.items() if got[k] != v}
        failed += bool(wrong)
        case = {"engine": engine, "shell": launch.shell, "parsed": got, "wrong": wrong}
        cases.append(case)
        print(json.dumps(case))
    if "--write" in sys.argv:
        record = json.loads(RESULTS.read_text("utf-8")) if RESULTS.is_file() else {}
        record[engine] = {
            "package": f"{engine} {metadata.version(engine)}",
            "parser": PARSER_NAMES[engine],
            "command": f"python -m bench.engines.flags {engine} --write",
            "cases": cases,
            "passed": not failed,
        }
        RESULTS.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", "utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
