"""The global batch of a training request: stated (in sequences or tokens), written by the
workload, or a published recipe's with a warning; and the refusals, by API and CLI."""

from importlib import resources
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner
from litestar import Litestar
from litestar.testing import TestClient

from gpuplan.cli import main
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.errors import DataError
from gpuplan.core.recommend import RecommendRequest, recommend
from gpuplan.core.recommend.batch import batch_defaults, parse_defaults, sequences_of
from gpuplan.core.recommend.schema import Candidate, RecommendResponse
from tests.helpers import problem_at, request_body, run_plan_file

CATALOG = builtin_catalog()
H100 = "h100-sxm5-80gb"


def llama70b(sequence_length: int = 4096, **training: Any) -> dict[str, Any]:
    """The issue's job: Llama-3.1-70B full training on 10B tokens, on H100s."""
    return {
        **request_body("llama-3.1-70b", mode="training", sequence_length=sequence_length),
        "training": {"training_tokens": 10_000_000_000, **training},
        "constraints": {"include": [H100]},
    }


def ask(body: dict[str, Any]) -> RecommendResponse:
    return recommend(msgspec.convert(body, RecommendRequest), CATALOG)


def top(response: RecommendResponse) -> Candidate:
    best = response.recommendations[0]
    assert best.fits
    assert best.time_hours is not None
    return best


def batch_of(c: Candidate) -> int | None:
    """The global batch a plan is laid out at."""
    assert c.layout is not None
    return c.layout.global_batch_size


def gpu_hours(c: Candidate) -> float:
    assert c.time_hours is not None
    return c.count * c.time_hours


def default_warning(response: RecommendResponse) -> str:
    (found,) = [w for w in response.warnings if w.startswith("no global batch stated")]
    return found


# ---------------------------------------------------------------- the default


@pytest.mark.parametrize("sequence_length", [2048, 4096])
def test_the_70b_job_without_a_global_batch_costs_what_it_does_with_512(
    sequence_length: int,
) -> None:
    # Issue 37's criterion: within 1.5x of the GPU-hours at a global batch of 512 (the
    # old default of one sequence came to 3x: 24 H100s for 424 h against 56 for 59 h).
    asked = top(ask(llama70b(sequence_length)))
    stated = top(ask(llama70b(sequence_length, global_batch_size=512)))
    ratio = gpu_hours(asked) / gpu_hours(stated)
    assert 1 / 1.5 <= ratio <= 1.5, (asked, stated)


def test_the_default_is_llama_2s_4m_tokens_with_a_warning_naming_its_source() -> None:
    response = ask(llama70b(4096))
    assert batch_of(top(response)) == 1024
    warning = default_warning(response)
    d = batch_defaults().of("training")
    assert d.tokens == 4_194_304
    for words in ("1,024 sequences", "4,194,304 tokens", "Llama 2", d.quote, "global_batch_size"):
        assert words in warning, words
    assert any("1,024 sequences" in a and "default" in a for a in response.assumptions)
    at_8k = ask(llama70b(8192, global_batch_tokens=4_194_304))
    assert not any(w.startswith("no global batch") for w in at_8k.warnings)


def test_data_parallel_layouts_are_reachable_by_default() -> None:
    body = {**llama70b(4096), "all_counts": True, "limit": 500}
    plans = [r.layout for r in ask(body).recommendations if r.fits and r.layout is not None]
    assert any(lay.data > 1 for lay in plans), plans


@pytest.mark.parametrize(
    ("body", "sequences", "source"),
    [
        (
            {
                **request_body("llama-3.1-8b", mode="finetune_lora", sequence_length=2048),
                "training": {"training_tokens": 10**8},
            },
            128,
            "Stanford Alpaca",
        ),
        (
            {
                **request_body("resnet-50", mode="training", image_size=224),
                "training": {"epochs": 1, "dataset_samples": 1_281_167},
            },
            256,
            "imagenet",
        ),
    ],
    ids=["lora", "vision"],
)
def test_each_kind_of_job_has_its_recipes_default(
    body: dict[str, Any], sequences: int, source: str
) -> None:
    response = ask(body)
    assert batch_of(top(response)) == sequences
    warning = default_warning(response)
    assert source in warning
    assert f"{sequences:,} {'images' if 'resnet' in str(body) else 'sequences'}" in warning


def test_a_micro_batch_above_the_default_is_kept() -> None:
    body = {
        **request_body("resnet-50", mode="training", image_size=224, batch_size=384),
        "training": {"epochs": 1, "dataset_samples": 1_281_167},
    }
    response = ask(body)
    assert batch_of(top(response)) == 384
    assert "batch_size" in default_warning(response)


def test_accumulation_or_data_parallelism_in_the_workload_states_the_batch() -> None:
    body = {
        **request_body(
            "llama-2-7b", mode="training", sequence_length=4096, batch_size=2,
            gradient_accumulation_steps=16, parallelism={"data": 4},
        ),
        "training": {"training_tokens": 10**9},
    }  # fmt: skip
    response = ask(body)
    assert {r.layout.global_batch_size for r in response.recommendations if r.layout} == {128}
    assert not any(w.startswith("no global batch") for w in response.warnings)


# ---------------------------------------------------------------- tokens per step


@pytest.mark.parametrize(
    ("tokens", "sequence_length", "sequences"),
    [
        (4_194_304, 4096, 1024),
        (4_194_304, 8192, 512),
        (4_000_000, 4096, 960),  # 976.6: the nearest multiple of 64
        (1_000_000, 3000, 320),  # 333.3
        (100_000, 4096, 32),  # 24.4: the nearest power of two below 64
        (1000, 4096, 1),
        (977 * 4096, 4096, 977),  # a whole number is kept
    ],
)
def test_tokens_per_step_become_sequences(
    tokens: int, sequence_length: int, sequences: int
) -> None:
    assert sequences_of(tokens, sequence_length, 64) == sequences


def test_global_batch_tokens_is_planned_and_said() -> None:
    response = ask(llama70b(4096, global_batch_tokens=4_000_000))
    assert batch_of(top(response)) == 960
    assert any("960 sequences" in a and "rounded" in a for a in response.assumptions)


@pytest.mark.parametrize(
    ("body", "paths", "reason"),
    [
        (
            llama70b(4096, global_batch_size=512, global_batch_tokens=4_194_304),
            ["$.training.global_batch_size", "$.training.global_batch_tokens"],
            "not both",
        ),
        (llama70b(4096, global_batch_tokens=0), ["$.training.global_batch_tokens"], ">= 1"),
        (
            llama70b(1, global_batch_tokens=10**12),
            ["$.training.global_batch_tokens"],
            "at most 16,777,216",
        ),
        (
            {
                **request_body("resnet-50", mode="training", image_size=224),
                "training": {"epochs": 1, "dataset_samples": 1000, "global_batch_tokens": 4096},
            },
            ["$.training.global_batch_tokens"],
            "in images",
        ),
        (
            {
                **request_body(
                    "llama-2-7b", mode="training", sequence_length=4096, parallelism={"data": 8}
                ),
                "layout": "given",
                "training": {"training_tokens": 10**9, "global_batch_tokens": 4_194_304},
            },
            ["$.training.global_batch_tokens"],
            "layout given",
        ),
    ],
    ids=["both", "zero", "too-many-sequences", "vision", "layout-given"],
)
def test_a_bad_global_batch_answers_422_naming_it(
    client: TestClient[Litestar], body: dict[str, Any], paths: list[str], reason: str
) -> None:
    for route in ("/v1/recommendations", "/v1/plan"):
        sent = body if route.endswith("s") else {**body, "targets": {"fits": {"gpu": H100}}}
        answer = problem_at(client.post(route, json=sent), paths[0])
        named = {e["path"]: e["reason"] for e in answer["errors"]}
        for path in paths:
            assert reason in named[path], named


def test_the_cli_refuses_both_with_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        ["recommend", "--model", "llama-3.1-70b", "--mode", "training", "--seq-len", "4096",
         "--tokens", "10000000000", "--global-batch-size", "512",
         "--global-batch-tokens", "4194304"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "$.training.global_batch_size" in result.output
    assert "$.training.global_batch_tokens" in result.output
    plan = {**llama70b(4096, global_batch_tokens=0), "targets": {"fits": {"gpu": H100}}}
    result = run_plan_file(tmp_path, plan)
    assert result.exit_code == 2, result.output
    assert "$.training.global_batch_tokens" in result.output


def test_the_cli_flag_states_tokens_per_step() -> None:
    result = CliRunner().invoke(
        main,
        ["recommend", "--model", "llama-3.1-70b", "--mode", "training", "--seq-len", "8192",
         "--tokens", "10000000000", "--global-batch-tokens", "4194304", "--include", H100,
         "--checkpointing", "full", "--format", "json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    body = msgspec.json.decode(result.output)
    assert body["recommendations"][0]["layout"]["global_batch_size"] == 512
    assert not any(w.startswith("no global batch") for w in body["warnings"])


# ---------------------------------------------------------------- the data file


def test_the_defaults_file_carries_a_source_and_quote_on_each() -> None:
    data = batch_defaults()
    assert {d.applies_to for d in data.default} == {"training", "lora", "vision"}
    assert all(d.source and d.quote for d in data.default)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ('quote = "All models', 'quote = "" #', "source and the quote"),
        ("sequences = 128", "sequences = 128\ntokens = 4194304", "exactly one"),
        ('applies_to = "vision"', 'applies_to = "lora"', "one default per kind"),
        ("round_to_multiple = 64", "round_to_multiple = 0", "round_to_multiple"),
        ("tokens = 4194304", "tokens = 0", "positive"),
    ],
)
def test_a_broken_defaults_file_is_refused(old: str, new: str, reason: str) -> None:
    text = (
        resources.files("gpuplan.core.recommend.data")
        .joinpath("global_batch.toml")
        .read_text("utf-8")
    )
    broken = text.replace(old, new, 1)
    assert broken != text
    with pytest.raises(DataError, match=reason):
        parse_defaults(broken, "global_batch.toml")
