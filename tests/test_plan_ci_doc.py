"""docs/ci.md's GitHub Actions workflow: valid YAML, and its plan step, run for real on
a pass and a fail plan, writes one report and the worst exit code."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from gpuplan.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _workflow() -> dict[str, Any]:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    match = re.search(r"<!-- ci-workflow -->\n```yaml\n(.*?)```\n<!-- /ci-workflow -->", text, re.S)
    assert match, "docs/ci.md lost its workflow block"
    loaded = yaml.safe_load(match[1])
    assert isinstance(loaded, dict)
    return loaded


def test_the_workflow_runs_plans_and_comments() -> None:
    wf = _workflow()
    steps = wf["jobs"]["plan"]["steps"]
    names = [s.get("name") for s in steps]
    assert "Check the plans" in names
    assert "Comment on the pull request" in names
    assert wf["permissions"] == {"contents": "read", "pull-requests": "write"}


def test_the_plan_step_reports_every_plan_and_the_worst_exit(tmp_path: Path) -> None:
    steps = _workflow()["jobs"]["plan"]["steps"]
    script = next(s["run"] for s in steps if s.get("name") == "Check the plans")
    (tmp_path / "plans").mkdir()
    shutil.copy(ROOT / "examples" / "stable-diffusion-rtx4090.yaml", tmp_path / "plans" / "a.yaml")
    shutil.copy(ROOT / "examples" / "llm-finetune-one-gpu.yaml", tmp_path / "plans" / "b.yaml")
    (tmp_path / "plans" / "c.yaml").write_text("targets: {}\n", encoding="utf-8")
    (tmp_path / "plans" / "team").mkdir()  # other suffixes and subfolders count too
    shutil.copy(
        ROOT / "examples" / "stable-diffusion-rtx4090.yaml", tmp_path / "plans" / "team" / "d.yml"
    )
    plan = yaml.safe_load((ROOT / "examples" / "stable-diffusion-rtx4090.yaml").read_text())
    (tmp_path / "plans" / "e.json").write_text(json.dumps(plan), encoding="utf-8")
    shim = tmp_path / "bin" / "gpuplan"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m gpuplan "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    output = tmp_path / "github_output"
    env = {
        **os.environ,
        "PATH": f"{shim.parent}:{os.environ['PATH']}",
        "GITHUB_OUTPUT": str(output),
        "GPUPLAN_API": "",
        "PYTHONPATH": str(ROOT / "service"),
    }
    subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, check=True)
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert report.startswith("<!-- gpuplan-report -->")
    assert "### ✅ gpuplan: all 4 targets pass" in report
    assert "### ❌ gpuplan: 2 of 2 targets fail" in report
    assert "$.model: Object missing required field `model`" in report  # c.yaml: invalid
    for name in (
        "plans/a.yaml",
        "plans/b.yaml",
        "plans/c.yaml",
        "plans/e.json",
        "plans/team/d.yml",
    ):
        assert f"#### `{name}`" in report
    assert report.count("### ✅ gpuplan: all 4 targets pass") == 3
    assert output.read_text(encoding="utf-8").strip() == "status=2"


def test_the_quoted_report_is_what_the_command_prints() -> None:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    match = re.search(r"```markdown\n(.*?)```\n", text, re.S)
    assert match
    example = str(ROOT / "examples" / "llm-finetune-one-gpu.yaml")
    result = CliRunner().invoke(main, ["plan", example, "--format", "markdown"])
    assert result.exit_code == 1
    assert result.output.startswith(match[1]), "docs/ci.md quotes a stale report"


def _install(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    """The install step, with a `python` that prints what pip would be asked for."""
    steps = _workflow()["jobs"]["plan"]["steps"]
    script = next(s["run"] for s in steps if s.get("name") == "Install gpuplan")
    shim = tmp_path / "bin" / "python"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text('#!/bin/sh\necho "pip: $@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = {"PATH": f"{shim.parent}:/usr/bin:/bin", **variables}
    return subprocess.run(
        ["bash", "-e", "-c", script], check=False, env=env, capture_output=True, text=True
    )


def test_the_install_step_never_installs_by_name_from_an_index(tmp_path: Path) -> None:
    pinned = _install(
        tmp_path,
        GPUPLAN_REPOSITORY="https://git.example.com/platform/gpuplan",
        GPUPLAN_REF="0" * 40,
    )
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert pinned.stdout.strip() == (
        "pip: -m pip install git+https://git.example.com/platform/gpuplan@" + "0" * 40
    )
    wheel = _install(tmp_path, GPUPLAN_INSTALL="dist/gpuplan-0.2.0-py3-none-any.whl")
    assert wheel.stdout.strip() == "pip: -m pip install dist/gpuplan-0.2.0-py3-none-any.whl"
    for refused in ({"GPUPLAN_INSTALL": "gpuplan"}, {}):
        result = _install(tmp_path, **refused)
        assert result.returncode == 2
        assert "pip:" not in result.stdout
