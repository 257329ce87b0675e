"""The CLI's options are generated from the request Structs: one declaration per field."""

from typing import Literal, get_args

import click
import msgspec
from click.testing import CliRunner

from gpuplan.cli import main
from gpuplan.cli.commands.estimate import OPTIONS as ESTIMATE
from gpuplan.cli.commands.recommend import OPTIONS as RECOMMEND
from gpuplan.cli.options import RequestOptions, field_options
from gpuplan.core.memory.schema import Precision
from gpuplan.core.record import Record


def _flags(options: RequestOptions) -> dict[str, click.Option]:
    return {opt: f.option for f in options.fields for opt in f.option.opts}


def test_a_field_added_to_a_struct_gets_its_flag() -> None:
    class Knobs(Record):
        sharpness: int = 3
        """How sharp."""

        style: Literal["a", "b"] = "a"
        tags: list[str] = []

    class Request(Record):
        knobs: Knobs = msgspec.field(default_factory=Knobs)

    options = {f.option.opts[0]: f for f in field_options(Request)}
    assert set(options) == {"--knobs-sharpness", "--knobs-style", "--knobs-tags"}
    sharp = options["--knobs-sharpness"]
    assert sharp.path == ("knobs", "sharpness")
    assert sharp.option.help == "How sharp. [$.knobs.sharpness; default: 3]"
    style = options["--knobs-style"].option.type
    assert isinstance(style, click.Choice)
    assert style.choices == ("a", "b")
    assert options["--knobs-tags"].option.multiple


def test_workload_fields_are_flags_with_the_schemas_choices() -> None:
    flags = _flags(ESTIMATE)
    for flag in ("--batch-size", "--kv-cache-dtype", "--max-new-tokens", "--lora-rank"):
        assert flag in flags
    precision = flags["--precision"].type
    assert isinstance(precision, click.Choice)
    assert set(precision.choices) == set(get_args(Precision))
    assert flags["--lora-target-modules"].multiple
    assert flags["--parallelism-sequence-parallel"].is_flag
    assert flags["--parallelism-sequence-parallel"].secondary_opts == [
        "--no-parallelism-sequence-parallel"
    ]


def test_old_flag_names_stay() -> None:
    flags = _flags(RECOMMEND)
    for old, field in (
        ("--seq-len", "workload__sequence_length"),
        ("--tensor-parallel", "workload__parallelism__tensor"),
        ("--tokens", "training__training_tokens"),
        ("--rps", "inference__requests_per_second"),
        ("--max-gpus", "constraints__max_gpus_per_job"),
        ("--vendor", "constraints__vendors"),
    ):
        assert flags[old].name == field


def test_flags_override_a_request_file(tmp_path: object) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "job.yaml"
    path.write_text(
        "model: {name: llama-2-7b}\n"
        "workload: {mode: inference, sequence_length: 1024, batch_size: 1}\n"
    )
    base = ["estimate", "-f", str(path), "--format", "json"]
    one = CliRunner().invoke(main, base)
    eight = CliRunner().invoke(main, [*base, "--batch-size", "8"])
    assert one.exit_code == eight.exit_code == 0, one.output + eight.output
    assert (
        msgspec.json.decode(eight.stdout)["peak_bytes"]
        > msgspec.json.decode(one.stdout)["peak_bytes"]
    )


def test_bool_fields_are_on_off_flags() -> None:
    args = ["estimate", "--model", "llama-2-7b", "--seq-len", "4096", "--batch-size", "8"]
    args += ["--mode", "inference", "--format", "json"]
    tp = ["--tensor-parallel", "2"]
    plain = CliRunner().invoke(main, [*args, *tp])
    split = CliRunner().invoke(main, [*args, *tp, "--parallelism-sequence-parallel"])
    assert plain.exit_code == split.exit_code == 0, split.output
    assert (
        msgspec.json.decode(split.stdout)["peak_bytes"]
        < msgspec.json.decode(plain.stdout)["peak_bytes"]
    )
