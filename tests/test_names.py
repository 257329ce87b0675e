"""Did you mean: one matching function (core/names.py) behind every refused name, so the
API's ``suggestions`` and the command line's message name the same few presets, GPUs
and MIG profiles, and never the whole list when one is close."""

from typing import Any

import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.config.catalog import load_catalog
from gpuplan.core.memory.presets import presets
from gpuplan.core.names import closest, did_you_mean, fold_name
from tests.helpers import problem_at

PRESETS = [(name, name) for name in presets()]

# What people type (a Hub id, a chat variant, a half-remembered version), and the
# presets they mean: each must come first, with at most two others beside it.
PRESET_TYPOS = [
    ("llama-3-8b", ["llama-3.1-8b"]),
    ("Qwen2.5-72B-Instruct", ["qwen2.5-72b"]),
    ("meta-llama/Llama-3.1-8B-Instruct", ["llama-3.1-8b"]),
    ("meta-llama/Meta-Llama-3-8B-Instruct", ["llama-3.1-8b"]),
    ("mistralai/Mistral-7B-Instruct-v0.2", ["mistral-7b"]),
    ("Llama-2-7b-chat-hf", ["llama-2-7b"]),
    ("llama3.1:70b", ["llama-3.1-70b"]),
    ("llama-3-70b", ["llama-3.1-70b", "llama-2-70b"]),
    ("qwen2.5", ["qwen2.5-7b", "qwen2.5-72b"]),
    ("Mixtral-8x7B-Instruct-v0.1", ["mixtral-8x7b"]),
    ("stable-diffusion-1.5", ["stable-diffusion-1.5-unet"]),
    ("resnet50", ["resnet-50"]),
    ("gpt-3", ["gpt-3-175b"]),
    ("yolov5", ["yolov5l", "yolov5m", "yolov5s"]),
]

GPU_TYPOS = [
    ("rtx4080", ["rtx-4090-24gb"]),
    ("NVIDIA H100 80GB HMB3", ["h100-sxm5-80gb"]),
    ("h100", ["h100-nvl-94gb", "h100-sxm5-80gb", "h100-pcie-80gb"]),
    ("h2000", ["h200-sxm-141gb"]),
    ("a100-sxm4-80g", ["a100-sxm4-80gb"]),
    ("RTX 4090 Ti", ["rtx-4090-24gb"]),
    ("tesla t4 16gb", ["t4-16gb"]),
    ("mi300", ["mi300x-192gb"]),
]


@pytest.mark.parametrize(("query", "meant"), PRESET_TYPOS)
def test_presets_people_type_find_the_one_they_mean(query: str, meant: list[str]) -> None:
    got = closest(query, PRESETS)
    assert got[: len(meant)] == meant, got
    assert len(got) <= 3


@pytest.mark.parametrize(("query", "meant"), GPU_TYPOS)
def test_gpu_names_people_type_find_the_one_they_mean(query: str, meant: list[str]) -> None:
    catalog = load_catalog(None)
    assert catalog.suggest(query)[: len(meant)] == meant
    assert len(catalog.suggest(query)) <= 3


def test_nothing_close_suggests_nothing() -> None:
    assert closest("falcon-7b", PRESETS) == []
    assert closest("command-r", PRESETS) == []
    assert closest("", PRESETS) == []


def test_a_close_name_is_not_drowned_by_the_family() -> None:
    # Every Llama shares "llama"; only the ones about as close as the best are kept.
    assert closest("llama-3-8b", PRESETS) == ["llama-3.1-8b"]
    # A loose match of the beginning (`rtx` of rtx-3050) does not outrank the card.
    suggested = load_catalog(None).suggest("rtx-6000-ada")
    assert suggested
    assert all(s.startswith("rtx-pro-") for s in suggested), suggested


def test_folding_drops_what_names_a_variant_of_the_same_weights() -> None:
    assert fold_name("meta-llama/Llama-3.1-8B-Instruct") == "llama318b"
    assert fold_name("Mistral-7B-Instruct-v0.2") == "mistral7b"
    assert fold_name("Llama-2-7b-chat-hf") == "llama27b"
    assert fold_name("bert-base") == "bertbase"


def test_did_you_mean_reads_as_a_sentence() -> None:
    assert did_you_mean([]) == ""
    assert did_you_mean(["a"]) == "; did you mean a?"
    assert did_you_mean(["a", "b", "c"]) == "; did you mean a, b or c?"


def _cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


@pytest.mark.parametrize(
    ("name", "meant"), [("llama-3-8b", "llama-3.1-8b"), ("Qwen2.5-72B-Instruct", "qwen2.5-72b")]
)
def test_the_cli_suggests_the_preset_not_the_list(name: str, meant: str) -> None:
    result = _cli("estimate", "--model", name)
    assert result.exit_code == 2
    assert f"$.model.name: no preset named {name!r}; did you mean {meant}?" in result.stderr
    assert "bert-base" not in result.stderr  # not every preset


def test_the_cli_lists_the_presets_when_none_is_close() -> None:
    result = _cli("estimate", "--model", "falcon-7b")
    assert result.exit_code == 2
    assert "bert-base" in result.stderr
    assert "yolov5s" in result.stderr
    assert "hf_config" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "--model", "llama-3.1-8b", "--gpu", "rtx4080"],
        ["recommend", "--model", "llama-3.1-8b", "--mode", "inference", "--seq-len", "512",
         "--include", "rtx4080"],
        ["mig", "profiles", "rtx4080"],
    ],
)  # fmt: skip
def test_the_cli_suggests_the_gpu(args: list[str]) -> None:
    result = _cli(*args)
    assert result.exit_code == 2
    assert "'rtx4080'; did you mean rtx-4090-24gb?" in result.stderr


def test_the_api_422_for_a_preset_carries_the_same_suggestions(
    client: TestClient[Litestar],
) -> None:
    for name, meant in PRESET_TYPOS[:2]:
        body = {"model": {"name": name}, "workload": {"mode": "inference", "sequence_length": 512}}
        answer = problem_at(client.post("/v1/memory/estimate", json=body), "$.model.name")
        assert answer["suggestions"] == meant == closest(name, PRESETS)
        assert f"did you mean {meant[0]}?" in answer["errors"][0]["reason"]
        plan = problem_at(client.post("/v1/recommendations", json=body), "$.model.name")
        assert plan["suggestions"] == meant


def test_the_api_404_and_422_for_a_gpu_carry_the_same_suggestions(
    client: TestClient[Litestar],
) -> None:
    meant = ["rtx-4090-24gb"]
    missing = client.get("/v1/gpus/rtx4080")
    assert missing.status_code == 404
    assert missing.json()["suggestions"] == meant
    assert missing.json()["detail"].endswith("did you mean rtx-4090-24gb?")
    body = {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 512},
        "gpu": "rtx4080",
    }
    assert (
        problem_at(client.post("/v1/memory/estimate", json=body), "$.gpu")["suggestions"] == meant
    )


def test_an_unknown_mig_profile_suggests_the_close_one(client: TestClient[Litestar]) -> None:
    body = {"gpu": "a100-sxm4-80gb", "workloads": [{"name": "a", "profile": "3g.4gb"}]}
    answer = problem_at(client.post("/v1/mig/plan", json=body), "$.workloads[0].profile")
    assert answer["suggestions"] == ["3g.40gb"]
    assert "did you mean 3g.40gb?" in answer["errors"][0]["reason"]
