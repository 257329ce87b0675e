"""gpuplan trace: file and module targets, JSON and table output, refused targets."""

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.torch

pytest.importorskip("torch")

from gpuplan.cli import main  # noqa: E402

TARGETS = Path(__file__).resolve().parent / "trace_targets" / "models.py"
MiB = 1 << 20


def test_file_target_json() -> None:
    result = CliRunner().invoke(
        main, ["trace", f"{TARGETS}:mlp", "--runtime", "cpu", "--format", "json"]
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["parameters"] == 256 * 1024 + 1024 + 1024 * 256 + 256
    b = body["breakdown"]
    assert b["parameters_bytes"] == 4 * body["parameters"]
    assert b["optimizer_state_bytes"] >= 8 * body["parameters"]  # AdamW: m and v
    assert body["peak_bytes"] == max(body["phases"].values())
    assert body["runtime"] == "cpu"
    assert body["steps"] == 2


def test_a_users_own_step_in_a_fresh_process() -> None:
    """``--step`` before any other trace in the process: the tracer's one-off calibration
    backward (the engine's gradient sums) ran through the step's patched ``backward``
    and recursed until Python gave up. The user's step traces to the built-in loop's peak."""
    from gpuplan.trace.accumulation import buffer_only_counts

    def peak(*extra: str) -> int:
        args = ["trace", f"{TARGETS}:mlp", "--runtime", "cpu", "--format", "json", *extra]
        out = CliRunner().invoke(main, args)
        assert out.exit_code == 0, out.output
        return int(json.loads(out.stdout)["peak_bytes"])

    buffer_only_counts.cache_clear()
    own = peak("--step", f"{TARGETS}:mlp_step")
    assert own == peak()


def test_expandable_segments_replay() -> None:
    """--expandable-segments replays the same tensors through the allocator's other rules
    (one growing segment per pool): the same peak, another reserve (here 4 MiB more: a
    20 MiB page granularity; bench.accuracy.varlen_replay checks the rules against an
    H200). Refused on the CPU runtime, which has no caching allocator."""

    def run(*extra: str) -> Any:
        args = ["trace", f"{TARGETS}:widening", "--format", "json", *extra]
        return CliRunner().invoke(main, args)

    default, expandable = run(), run("--expandable-segments")
    assert default.exit_code == expandable.exit_code == 0, default.output + expandable.output
    plain, grown = json.loads(default.stdout), json.loads(expandable.stdout)
    assert grown["peak_bytes"] == plain["peak_bytes"]
    assert (plain["reserved_bytes"], grown["reserved_bytes"]) == (498 * MiB, 502 * MiB)
    assert any("expandable segments" in note for note in grown["notes"])
    refused = run("--runtime", "cpu", "--expandable-segments")
    assert refused.exit_code == 2
    assert "--expandable-segments" in refused.stderr


def test_module_target_cuda_table() -> None:
    result = CliRunner().invoke(
        main,
        ["trace", "tests.trace_targets.models:checkpointed", "--optimizer", "sgd", "--steps", "3"],
    )
    assert result.exit_code == 0, result.output
    assert "reserved" in result.output
    assert "top modules" in result.output
    assert "caching allocator" in result.output


def test_inference_and_fsdp_json() -> None:
    runner = CliRunner()
    whole = json.loads(
        runner.invoke(main, ["trace", f"{TARGETS}:checkpointed", "--format", "json"]).output
    )
    sharded = json.loads(
        runner.invoke(
            main, ["trace", f"{TARGETS}:checkpointed", "--fsdp", "4", "--format", "json"]
        ).output
    )
    assert sharded["peak_bytes"] < whole["peak_bytes"]
    assert any("FSDP2" in note for note in sharded["notes"])
    inference = json.loads(
        runner.invoke(
            main, ["trace", f"{TARGETS}:mlp", "--mode", "inference", "--format", "json"]
        ).output
    )
    assert inference["phases"]["backward_bytes"] == 0
    assert inference["breakdown"]["gradients_bytes"] == 0


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nocolon", "package.module:function"),
        ("tests.trace_targets.models:nothing", "no attribute"),
        ("/no/such/file.py:f", "does not exist"),
        ("tests.trace_targets.models:not_a_pair", "must return"),
        ("tests.trace_targets.models:raises", "ValueError: no model today"),
    ],
)
def test_bad_targets(target: str, message: str) -> None:
    result = CliRunner().invoke(main, ["trace", target])
    assert result.exit_code != 0
    assert message in result.output


def test_tensor_parallel_needs_a_plan() -> None:
    result = CliRunner().invoke(main, ["trace", f"{TARGETS}:mlp", "--tensor-parallel", "2"])
    assert result.exit_code != 0
    assert "base_model_tp_plan" in result.output
    both = CliRunner().invoke(
        main, ["trace", f"{TARGETS}:mlp", "--tensor-parallel", "2", "--fsdp", "2"]
    )
    assert both.exit_code != 0
    assert "base_model_tp_plan" in both.output


def test_gpu_architecture_sizes_the_cublaslt_workspace() -> None:
    runner = CliRunner()

    def peak(*extra: str) -> int:
        out = runner.invoke(main, ["trace", f"{TARGETS}:mlp", "--format", "json", *extra])
        assert out.exit_code == 0, out.output
        return int(json.loads(out.stdout)["peak_bytes"])

    # Two threads (forward, autograd) x a 32 MiB cuBLAS workspace on Hopper instead of
    # 8,519,680 B (aten/src/ATen/cuda/CublasHandlePool.cpp; cuBLASLt shares it).
    assert peak("--gpu", "h100-sxm5-80gb") - peak() == 2 * (32 * (1 << 20) - 8_519_680)
    unknown = runner.invoke(main, ["trace", f"{TARGETS}:mlp", "--gpu", "no-such-gpu"])
    assert unknown.exit_code == 2
    assert "no-such-gpu" in unknown.output


def test_kernel_probes_on_the_cpu_runtime() -> None:
    """runtime cpu measures oneDNN's in-kernel scratch by default and says so; a budget
    of 0 bytes turns the probes off (lower peak, no such note)."""
    runner = CliRunner()

    def traced(*extra: str) -> dict[str, Any]:
        args = ["trace", f"{TARGETS}:cnn", "--runtime", "cpu", "--format", "json", *extra]
        out = runner.invoke(main, args)
        assert out.exit_code == 0, out.output
        answer: dict[str, Any] = json.loads(out.stdout)
        return answer

    probed, unprobed = traced(), traced("--probe-budget-bytes", "0")
    assert probed["peak_bytes"] > unprobed["peak_bytes"]
    assert any("measured by running each once on this CPU" in n for n in probed["notes"])
    assert not any("in-kernel scratch" in n for n in unprobed["notes"])
    small = traced("--probe-budget-bytes", "4096")
    assert small["peak_bytes"] == unprobed["peak_bytes"]
    assert any("probe budget of 4,096 bytes" in n for n in small["notes"])


def test_decode_steps() -> None:
    runner = CliRunner()
    target = "tests.trace_targets.models:hf_llama_generate"
    out = runner.invoke(
        main, ["trace", target, "--mode", "inference", "--new-tokens", "3", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    result = json.loads(out.stdout)
    assert result["new_tokens"] == 3
    assert result["phases"]["decode_bytes"] > 0
    table = runner.invoke(main, ["trace", target, "--mode", "inference", "--new-tokens", "3"])
    assert "peak in decode (3)" in table.output
    train = runner.invoke(main, ["trace", target, "--new-tokens", "3"])
    assert train.exit_code == 2  # refused as input, by the API's own rule, before tracing
    assert "--new-tokens: decode steps need mode 'inference'" in train.stderr


@pytest.mark.slow
def test_keep_outputs_and_a_users_own_step() -> None:
    """--keep-outputs holds the logits (and the KV cache) through backward; a user's step
    written as the built-in loop traces to the same peak, and one that keeps its output
    to the --keep-outputs peak."""
    runner = CliRunner()

    def peak(*extra: str) -> int:
        args = ["trace", f"{TARGETS}:hf_llama", "--runtime", "cpu", "--format", "json", *extra]
        out = runner.invoke(main, args)
        assert out.exit_code == 0, out.output
        return int(json.loads(out.stdout)["peak_bytes"])

    plain, kept = peak(), peak("--keep-outputs")
    assert kept > plain
    assert peak("--step", f"{TARGETS}:hf_llama_trainer_step") == plain
    assert peak("--step", f"{TARGETS}:hf_llama_step") == kept
