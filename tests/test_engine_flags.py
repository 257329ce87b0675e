"""The launch commands of serving plans use each engine's own argument names.

vLLM, SGLang and TensorRT-LLM do not install here (vLLM and SGLang need their CUDA
builds' dependencies, TensorRT-LLM is not on PyPI): their emitted flags are checked
against the names read from each engine's source at a cited version
(tests/fixtures/engine_flags.toml); bench/engines/flags.py parses whole commands with
vLLM's and SGLang's own parsers where they install. transformers is a dev dependency, so
its ``transformers serve`` command is parsed here by transformers' own CLI.
"""

import shlex
import tomllib
from pathlib import Path
from typing import Any

import click
import msgspec
import pytest

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend import launch as launch_module
from gpuplan.core.recommend.engine import (
    default_max_concurrency,
    default_token_budget,
    engines_data,
    large_gpu,
)
from gpuplan.core.recommend.schema import Engine, Launch

CATALOG = builtin_catalog()
NAMES: dict[str, Any] = tomllib.loads(
    (Path(__file__).parent / "fixtures" / "engine_flags.toml").read_text("utf-8")
)
ENGINES: tuple[Engine, ...] = ("vllm", "sglang", "trtllm", "transformers", "compiled")

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("llama-3.1-70b", {}, {"include": ["h100-sxm5-80gb"]}),
    ("llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {"include": ["l4-24gb"]}),
    ("llama-3.1-8b", {}, {"include": ["mi300x-192gb"]}),
    ("qwen2.5-7b", {}, {"include": ["a100-sxm4-80gb"], "gpu_counts": [2]}),
]
"""One plan per engine for each: tensor parallel above 1, an fp8 KV cache, an AMD GPU."""


def launch_of(engine: str, model: str, workload: dict[str, Any], c: dict[str, Any]) -> Launch:
    static = engine in {"transformers", "compiled"}
    body = {
        "model": {"name": model},
        "workload": {"mode": "inference", "sequence_length": 1024, **workload},
        "inference": {
            "prompt_tokens": 1024,
            "output_tokens": 256,
            "engine": engine,
            **({} if static else {"max_model_len": "auto"}),
        },
        "constraints": c,
    }
    answer = recommend(msgspec.convert(body, RecommendRequest), CATALOG)
    launch = answer.recommendations[0].launch
    assert launch is not None
    return launch


def unknown_flags(engine: str, command: list[str]) -> list[str]:
    """The options of ``command`` that the engine's own parser (or its launcher's) does
    not define."""
    names = set(NAMES[engine]["names"]) | set(NAMES[engine].get("launcher_names", []))
    return [
        arg.split("=", 1)[0]
        for arg in command
        if arg.startswith("-") and arg.split("=", 1)[0] not in names
    ]


def test_the_check_catches_a_misspelt_flag() -> None:
    assert unknown_flags("vllm", ["vllm", "serve", "m", "--max-num-seq", "8"]) == ["--max-num-seq"]
    assert unknown_flags("trtllm", ["trtllm-serve", "m", "--tp-size", "2"]) == ["--tp-size"]
    assert unknown_flags("vllm", ["vllm", "serve", "m", "--max-num-seqs", "8"]) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_every_flag_a_plan_can_emit_is_the_engines_own(engine: Engine) -> None:
    names = set(NAMES[engine]["names"]) | set(NAMES[engine].get("launcher_names", []))
    flags = {f for f in engines_data().engines[engine].flags.values() if f.startswith("-")}
    assert flags <= names, sorted(flags - names)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("model", "workload", "constraints"), CASES)
def test_emitted_commands_use_only_the_engines_names(
    engine: str, model: str, workload: dict[str, Any], constraints: dict[str, Any]
) -> None:
    launch = launch_of(engine, model, workload, constraints)
    table = NAMES[engine]
    program = table["program_tp"] if launch.tensor_parallel > 1 and "program_tp" in table else None
    prefix = program or table["program"]
    assert launch.command[: len(prefix)] == prefix
    assert unknown_flags(engine, launch.command[len(prefix) :]) == []
    if table["positional_model"]:
        # The model right after the program, where the engine's parser takes it.
        assert not launch.command[len(table["program"])].startswith("-")


def values(command: list[str]) -> dict[str, str]:
    """``--flag value`` pairs (a flag followed by another flag is a switch)."""
    out: dict[str, str] = {}
    for i, arg in enumerate(command):
        if arg.startswith("--"):
            nxt = command[i + 1] if i + 1 < len(command) else ""
            out[arg] = "" if nxt.startswith("--") or not nxt else nxt
    return out


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_the_flags_carry_the_plans_values(engine: Engine) -> None:
    launch = launch_of(engine, "llama-3.1-70b", {}, {"include": ["h100-sxm5-80gb"]})
    flags = engines_data().engines[engine].flags
    got = values(launch.command)
    assert int(got[flags["tensor_parallel"]]) == launch.tensor_parallel
    assert float(got[flags["memory_fraction"]]) == launch.memory_fraction
    assert int(got[flags["max_model_len"]]) == launch.max_model_len
    assert int(got[flags["max_concurrency"]]) == launch.max_concurrency
    assert launch.resources.limits == {"nvidia.com/gpu": str(launch.tensor_parallel)}


def test_an_fp8_cache_is_named_as_each_engine_names_it() -> None:
    for engine, name in (("vllm", "fp8"), ("sglang", "fp8_e4m3")):
        launch = launch_of(
            engine, "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {"include": ["l4-24gb"]}
        )
        assert values(launch.command)["--kv-cache-dtype"] == name
    trt = launch_of("trtllm", "llama-3.1-8b", {"kv_cache_dtype": "fp8"}, {"include": ["l4-24gb"]})
    assert "--kv-cache-dtype" not in trt.command
    assert any("kv_cache_config.dtype" in n for n in trt.notes)


@pytest.mark.torch
def test_transformers_serve_parses_the_command_with_its_own_cli() -> None:
    from transformers.cli.transformers import app

    launch = launch_of("transformers", "llama-3.1-8b", {}, {"include": ["h100-sxm5-80gb"]})
    assert launch.command[:2] == ["transformers", "serve"]
    ctx = click.Context(app, info_name="transformers")
    serve = app.get_command(ctx, "serve")
    assert serve is not None
    parsed = serve.make_context("serve", launch.command[2:], parent=ctx).params
    assert parsed["force_model"] == "meta-llama/Llama-3.1-8B"
    assert parsed["dtype"] == "bfloat16"
    assert parsed["device"] == "cuda"
    with pytest.raises(click.NoSuchOption):
        serve.make_context("serve", [*launch.command[2:], "--max-num-seqs", "8"], parent=ctx)


@pytest.mark.torch
def test_a_tensor_parallel_gpt_fast_run_parses_with_torchruns_own_parser() -> None:
    from torch.distributed.run import get_args_parser

    launch = launch_of("compiled", "llama-3.1-70b", {}, {"include": ["h100-sxm5-80gb"]})
    assert launch.tensor_parallel > 1
    run = get_args_parser().parse_args(launch.command[1:])
    assert run.standalone
    assert int(run.nproc_per_node) == launch.tensor_parallel
    assert run.training_script == "generate.py"
    script = run.training_script_args
    assert values(script)["--checkpoint_path"] == "checkpoints/meta-llama/Llama-3.1-70B/model.pth"
    assert int(values(script)["--max_new_tokens"]) == 256
    assert "--compile" in script


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_expert_parallel_commands_use_the_engines_names_and_carry_the_plan(engine: Engine) -> None:
    # DeepSeek-V3 on H200s at a rate one expert-parallel replica of 8 serves.
    body = {
        "model": {"name": "deepseek-v3"},
        "workload": {
            "mode": "inference",
            "sequence_length": 2048,
            "precision": "fp8",
            "weight_quantization": "fp8",
        },
        "inference": {"output_tokens": 512, "requests_per_second": 20, "engine": engine},
        "constraints": {"include": ["h200-sxm-141gb"]},
        "all_counts": True,
    }
    # The expert-parallel candidate, wherever the objective ranks it (the tensor-parallel
    # plan's shorter TPOT can rank first under "balanced").
    answer = recommend(msgspec.convert(body, RecommendRequest), CATALOG)
    (launch,) = [
        c.launch for c in answer.recommendations if c.layout is not None and c.layout.expert > 1
    ][:1]
    assert launch is not None
    assert launch.expert_parallel == launch.data_parallel == 8
    prefix = NAMES[engine]["program"]
    assert unknown_flags(engine, launch.command[len(prefix) :]) == []
    flags = engines_data().engines[engine].flags
    got = values(launch.command)
    if engine != "trtllm":  # TensorRT-LLM has no flag for the attention ranks
        assert int(got[flags["data_parallel"]]) == 8
    assert int(got[flags["max_concurrency"]]) == launch.max_concurrency
    if engine == "vllm":
        assert int(got[flags["tensor_parallel"]]) == 1  # EP size = TP x DP
        assert flags["expert_parallel"] in launch.command  # a switch
    elif engine == "sglang":  # tp_size counts every GPU, dp_size equals it under DP attention
        assert int(got[flags["tensor_parallel"]]) == 8
        assert int(got[flags["expert_parallel"]]) == 8
        assert flags["dp_attention"] in launch.command
    else:  # TensorRT-LLM: tp_size counts every GPU; attention DP is an option of its YAML
        assert int(got[flags["tensor_parallel"]]) == 8
        assert int(got[flags["expert_parallel"]]) == 8
        config = got[flags["config"]]
        assert launch.config_files == {config: "enable_attention_dp: true\n"}
    if engine != "trtllm":
        assert launch.config_files == {}
    assert launch.resources.limits == {"nvidia.com/gpu": "8"}


def test_sglang_mixes_chunks_unless_the_request_says_it_does_not() -> None:
    def command(mixed: bool) -> list[str]:
        body = {
            "model": {"name": "llama-3.1-8b"},
            "workload": {"mode": "inference", "sequence_length": 1024},
            "inference": {"engine": "sglang", "output_tokens": 256, "mixed_chunk": mixed},
            "constraints": {"include": ["h100-sxm5-80gb"]},
        }
        answer = recommend(msgspec.convert(body, RecommendRequest), CATALOG)
        launch = answer.recommendations[0].launch
        assert launch is not None
        return launch.command

    assert "--enable-mixed-chunk" in command(True)
    assert "--enable-mixed-chunk" not in command(False)


@pytest.mark.parametrize(
    "command",
    [
        ["vllm", "serve", "meta-llama/Llama-3.1-8B", "--tensor-parallel-size", "2"],
        ["x", "", "a b", "it's", "ünïcode", "$HOME", "a=b,c:d/e.f@g%h+i-j_k", "tab\there"],
        ["--config", "/tmp/extra llm api options.yaml", "*", "~", "!", "a;b", "'"],
    ],
)
def test_the_shell_line_is_shlex_join_of_the_command(command: list[str]) -> None:
    """The launch's ``shell`` skips ``shlex.quote`` for words of safe characters: the
    same line ``shlex.join`` writes, every other word quoted as it quotes it."""
    assert launch_module._shell(command) == shlex.join(command)


def test_vllms_larger_defaults_go_to_large_gpus_but_the_a100() -> None:
    """vLLM's ``EngineArgs._set_default_args``: 70 GiB or more and no "a100" in the
    device name gives 1024 sequences and 8192 tokens a step; the rest 256 and 2048."""
    catalog = builtin_catalog()
    for gpu_id, large in (
        ("h100-sxm5-80gb", True),
        ("mi300x-192gb", True),
        ("a100-sxm4-80gb", False),
        ("l4-24gb", False),
    ):
        gpu = catalog.get(gpu_id)
        assert large_gpu(gpu) is large, gpu_id
        assert default_max_concurrency(gpu) == (1024 if large else 256), gpu_id
        assert default_token_budget(gpu) == (8192 if large else 2048), gpu_id
