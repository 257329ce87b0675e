"""``gpuplan plan FILE``: exit codes 0/1/2/3, the three formats, and ``--api`` against a
real ``gpuplan serve`` giving the same output as the local computation."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml
from click.testing import CliRunner

from gpuplan.cli import main
from gpuplan.core.ci import CiReport
from tests.conftest import free_port
from tests.test_serve import serving

PASSING: dict[str, Any] = {
    "model": {"name": "llama-2-7b"},
    "workload": {"mode": "inference", "sequence_length": 4096, "precision": "bf16"},
    "targets": {
        "fits": {"gpu": "NVIDIA L4", "count": 1},
        "mig_profile_at_most": {"gpu": "a100-sxm4-80gb", "profile": "3g.40gb"},
        "min_memory_headroom": 0.1,
    },
}
FAILING: dict[str, Any] = {**PASSING, "targets": {**PASSING["targets"], "min_memory_headroom": 0.5}}


def _write(tmp_path: Path, doc: Any, name: str = "plan.yaml") -> Path:
    path = tmp_path / name
    text = json.dumps(doc) if name.endswith(".json") else yaml.safe_dump(doc)
    path.write_text(text, encoding="utf-8")
    return path


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, ["plan", *args])


def test_exit_0_when_every_target_passes(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, PASSING)))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("PASS  fits")
    # The smallest MIG slice that holds the estimate's 95% high end (tests/test_plan_core.py
    # checks the rule; which slice it is moves with the intervals).
    assert "nvidia.com/mig-" in result.output


def test_exit_1_when_a_target_fails_with_markdown_verdicts_first(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, FAILING)), "--format", "markdown")
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines[0] == "### ❌ gpuplan: 1 of 3 targets fail"
    verdicts = [line for line in lines if line.startswith(("| ✅", "| ❌"))]
    assert [v.split("`")[1] for v in verdicts] == [
        "fits",
        "mig_profile_at_most",
        "min_memory_headroom",
    ]
    assert verdicts[2].startswith("| ❌")
    table = lines.index(
        "| # | GPU | count | layout | GiB/GPU | mem | hours | USD | USD/GPU-h | score |"
    )
    assert lines.index(verdicts[-1]) < table
    assert "<details><summary>MIG" in result.output


def test_markdown_draws_memory_bars_and_the_headroom(tmp_path: Path) -> None:
    plan = str(_write(tmp_path, PASSING, "plan.json"))
    report = msgspec.json.decode(_run(plan, "--format", "json").output, type=CiReport)
    lines = _run(plan, "--format", "markdown").output.splitlines()
    legend = next(i for i, line in enumerate(lines) if line.startswith("<sub>█"))
    bars = [line for line in lines[:legend] if line.startswith("- `")]
    drawn = [line.split("`")[1] for line in bars]
    assert [len(bar) for bar in drawn] == [40, 40, 40]  # one fixed width, in inline code
    e = report.estimate
    fits = next(v for v in report.verdicts if v.target == "fits")
    assert fits.actual is not None
    assert fits.limit is not None
    widest = max(e.required_bytes, fits.actual, fits.limit)
    # Each bar's length is its bytes at the widest's scale; the first shows its parts.
    assert len(drawn[0].rstrip()) == round(e.required_bytes / widest * 40)
    assert set(drawn[0].rstrip()) <= {"█", "▒", "░"}
    assert drawn[0].count("█") == round(e.peak_bytes / widest * 40)
    assert len(drawn[1].rstrip()) == round(fits.actual / widest * 40)
    assert drawn[2].rstrip().endswith("┤")
    assert len(drawn[2].rstrip()) == round(fits.limit / widest * 40)
    assert bars[0].endswith(f"{e.required_bytes / 2**30:,.2f} GiB one GPU as written")
    assert bars[2].endswith(f"{fits.limit / 2**30:,.2f} GiB usable on `{fits.gpu}`")
    spare = (fits.limit - fits.actual) / 2**30
    headroom = next(line for line in lines if line.startswith("Headroom on"))
    assert f"**{spare:+.2f} GiB**" in headroom
    assert f"needs {fits.actual / fits.limit:.0%} of the" in headroom


def test_json_format_is_the_report(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, PASSING, "plan.json")), "--format", "json")
    assert result.exit_code == 0
    report = msgspec.json.decode(result.output, type=CiReport)
    assert report.passed
    assert report.plan_id.startswith("sha256:")


@pytest.mark.parametrize(
    ("doc", "where"),
    [
        ({**PASSING, "targets": {"fits": {"gpu": "NVIDIA L5"}}}, "$.targets.fits.gpu"),
        ({**PASSING, "targets": {"fits": {"gpux": "NVIDIA L4"}}}, "$.targets.fits"),
        ({**PASSING, "workload": {"mode": "serving"}}, "$.workload.mode"),
        ({**PASSING, "targets": {}}, "$.targets"),
        ([1, 2], "$"),
    ],
)
def test_exit_2_on_invalid_input_naming_the_field(tmp_path: Path, doc: Any, where: str) -> None:
    result = _run(str(_write(tmp_path, doc)))
    assert result.exit_code == 2, result.output
    assert where in result.output


def test_exit_2_on_an_unreadable_file(tmp_path: Path) -> None:
    bad = tmp_path / "plan.yaml"
    bad.write_text("model: [unclosed", encoding="utf-8")
    result = _run(str(bad))
    assert result.exit_code == 2
    assert "not valid YAML" in result.output
    assert _run(str(tmp_path / "missing.yaml")).exit_code == 2


def test_a_real_process_exits_with_the_verdict(tmp_path: Path) -> None:
    ok = subprocess.run(
        [sys.executable, "-m", "gpuplan", "plan", str(_write(tmp_path, PASSING))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "gpuplan", "plan", str(_write(tmp_path, FAILING, "f.yaml"))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 1
    assert "FAIL  min_memory_headroom" in bad.stdout


def test_api_gives_the_local_answer_and_the_same_exit_codes(tmp_path: Path) -> None:
    good, failing = _write(tmp_path, PASSING), _write(tmp_path, FAILING, "f.yaml")
    invalid = _write(tmp_path, {**PASSING, "targets": {"fits": {"gpu": "NVIDIA L5"}}}, "i.yaml")
    with serving() as base:
        for fmt in ("json", "markdown"):
            remote = _run(str(good), "--api", base, "--format", fmt)
            local = _run(str(good), "--format", fmt)
            assert remote.exit_code == local.exit_code == 0, remote.output
            assert remote.output == local.output
        assert _run(str(failing), "--api", base).exit_code == 1
        wrong = _run(str(good), "--api", base + "/nothing")
        assert wrong.exit_code == 3, wrong.output
        assert "404" in wrong.output
        refused = _run(str(invalid), "--api", base)
        assert refused.exit_code == 2
        assert "$.targets.fits.gpu" in refused.output


def test_api_unreachable_is_exit_3(tmp_path: Path) -> None:
    result = _run(str(_write(tmp_path, PASSING)), "--api", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == 3
    assert "cannot reach" in result.output
    assert _run(str(_write(tmp_path, PASSING)), "--api", "file:///etc/passwd").exit_code == 2


def test_plan_schema_command_prints_the_committed_schema() -> None:
    result = CliRunner().invoke(main, ["plan-schema"])
    assert result.exit_code == 0
    committed = Path(__file__).resolve().parent.parent / "api" / "plan.schema.json"
    assert json.loads(result.output) == json.loads(committed.read_text(encoding="utf-8"))


def test_api_with_tokens_takes_the_token_from_a_file_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = "ci-" + "k" * 29
    good = _write(tmp_path, PASSING)
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    monkeypatch.delenv("GPUPLAN_API_TOKEN", raising=False)
    monkeypatch.delenv("GPUPLAN_API_TOKEN_FILE", raising=False)
    with serving(settings={"GPUPLAN_API_TOKENS": token}) as base:
        refused = _run(str(good), "--api", base)
        assert refused.exit_code == 3, refused.output
        assert "401" in refused.output
        assert _run(str(good), "--api", base, "--token-file", str(token_file)).exit_code == 0
        monkeypatch.setenv("GPUPLAN_API_TOKEN", token)
        assert _run(str(good), "--api", base).exit_code == 0
        monkeypatch.setenv("GPUPLAN_API_TOKEN", "wrong-" + "x" * 26)
        assert _run(str(good), "--api", base).exit_code == 3
    empty = tmp_path / "empty"
    empty.write_text("\n")
    result = _run(str(good), "--api", "http://127.0.0.1:1", "--token-file", str(empty))
    assert result.exit_code == 2
    assert "--token-file" in result.output


def test_a_fits_only_training_plan_runs(tmp_path: Path) -> None:
    plan = tmp_path / "fits.yaml"
    plan.write_text(
        "model: {name: llama-2-7b}\n"
        "workload: {mode: training, sequence_length: 2048}\n"
        "targets: {fits: {gpu: l4, count: 1}}\n"
    )
    result = _run(str(plan))
    assert result.exit_code == 1, result.output  # it ran, and 7B full training misses an L4
    assert result.output.startswith("FAIL  fits")


def test_the_mig_section_lists_the_gpus_that_hold_the_job_and_counts_the_rest(
    tmp_path: Path,
) -> None:
    """examples/llm-finetune-one-gpu.yaml: a few MIG GPUs hold its 154 GiB in one
    instance; the others get one line, not one each."""
    plan = "examples/llm-finetune-one-gpu.yaml"
    report = msgspec.json.decode(_run(plan, "--format", "json").output, type=CiReport)
    holding = [m for m in report.mig if m.profile is not None]
    none = [m for m in report.mig if m.profile is None]
    assert holding
    assert len(none) > len(holding)
    table = _run(plan).output.splitlines()
    mig = [line for line in table if line.startswith("mig  ")]
    assert mig[0] == (
        f"mig  smallest MIG instance holding the job, on {len(holding)} of {len(report.mig)} "
        "MIG GPUs:"
    )
    assert [line.split()[1:3] for line in mig[1:-1]] == [[m.gpu, m.profile] for m in holding]
    need = min(m.required_bytes for m in none) / 2**30
    assert mig[-1] == (
        f"mig  no profile of the other {len(none)} MIG GPUs holds the job "
        f"(it needs at least {need:.2f} GiB)"
    )
    assert "no profile holds it" not in "\n".join(table)
    markdown = _run(plan, "--format", "markdown").output
    details = markdown[markdown.index("<details><summary>MIG") :]
    details = details[: details.index("</details>")]
    assert [row.split("`")[1] for row in details.splitlines() if row.startswith("| `")] == [
        m.gpu for m in holding
    ]
    assert f"no profile of the other {len(none)} MIG GPUs holds the job" in details


def test_when_no_mig_gpu_holds_the_job_the_section_is_one_line() -> None:
    plan = "examples/gpt3-175b-inference.yaml"
    report = msgspec.json.decode(_run(plan, "--format", "json").output, type=CiReport)
    assert report.mig
    assert all(m.profile is None for m in report.mig)
    mig = [line for line in _run(plan).output.splitlines() if line.startswith("mig  ")]
    assert len(mig) == 1
    assert mig[0].startswith(f"mig  no profile of the {len(report.mig)} MIG GPUs holds the job")
