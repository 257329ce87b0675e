"""``gpuplan estimate``'s exit status is its verdict, as ``gpuplan plan``'s is: 0 the job
fits the GPU given (or none was given), 1 it does not fit, 2 invalid input."""

import json

import pytest
from click.testing import CliRunner

from gpuplan.cli import main

LORA_8B = ["estimate", "--model", "llama-3.1-8b", "--mode", "finetune_lora", "--seq-len", "2048"]


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_exit_1_when_the_job_does_not_fit_the_gpu(fmt: str) -> None:
    result = CliRunner().invoke(main, [*LORA_8B, "--gpu", "rtx-4090", "--format", fmt])
    assert result.exit_code == 1, result.output
    if fmt == "json":
        assert json.loads(result.stdout)["fit"]["fits"] is False
    else:
        assert "rtx-4090-24gb: does NOT fit" in result.stdout
        # What to do next, not only the verdict.
        assert "gpuplan recommend with these flags, --preferred-gpu rtx-4090-24gb" in result.stdout


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_exit_0_when_it_fits_or_no_gpu_is_given(fmt: str) -> None:
    fits = CliRunner().invoke(main, [*LORA_8B, "--gpu", "h100-sxm5-80gb", "--format", fmt])
    assert fits.exit_code == 0, fits.output
    assert "does NOT fit" not in fits.stdout
    no_gpu = CliRunner().invoke(main, [*LORA_8B, "--format", fmt])
    assert no_gpu.exit_code == 0, no_gpu.output


def test_exit_2_on_invalid_input_and_the_codes_in_the_help() -> None:
    assert CliRunner().invoke(main, [*LORA_8B, "--gpu", "rtx4080"]).exit_code == 2
    help_text = " ".join(CliRunner().invoke(main, ["estimate", "--help"]).output.split())
    assert (
        "Exit 0 when the job fits the --gpu given (or no GPU is given), 1 when it does not fit, 2 on invalid input"
        in help_text
    )
