"""gpuplan mig plan / validate / profiles: the API's schemas from YAML and JSON files."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from gpuplan.cli import main

PLAN = """
gpu: NVIDIA A100-SXM4-80GB
workloads:
  - name: infer
    memory_gib: 15
    count: 5
  - name: train
    profile: 3g.40gb
    count: 2
"""


def test_plan_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    result = CliRunner().invoke(main, ["mig", "plan", str(path)])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["gpu"] == "a100-sxm4-80gb"
    assert body["gpus_used"] == body["lower_bound"]


def test_plan_writes_the_mig_parted_config(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(yaml.safe_load(PLAN)))
    out = tmp_path / "config.yaml"
    result = CliRunner().invoke(
        main, ["mig", "plan", str(path), "--output", "mig-parted", "--write", str(out)]
    )
    assert result.exit_code == 0, result.output
    config = yaml.safe_load(out.read_text())
    assert config["version"] == "v1"
    assert "gpuplan-all" in config["mig-configs"]
    printed = CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "mig-parted"])
    assert printed.output == out.read_text()


def test_plan_yaml_output(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    result = CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "yaml"])
    assert yaml.safe_load(result.output)["single_strategy"]["possible"] is False


def test_validate_exit_status(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("gpu: h100-sxm5-80gb\ninstances:\n  - profile: 4g.40gb\n  - profile: 3g.40gb\n")
    result = CliRunner().invoke(main, ["mig", "validate", str(good)])
    assert result.exit_code == 0
    assert json.loads(result.output)["creation_order"] == ["4g.40gb", "3g.40gb"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpu: h100-sxm5-80gb\ninstances:\n  - {profile: 1g.10gb, start: 7}\n")
    result = CliRunner().invoke(main, ["mig", "validate", str(bad)])
    assert result.exit_code == 1
    assert json.loads(result.output)["reasons"][0]["kind"] == "no-such-placement"


def test_bad_input_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("gpu: a100-sxm4-80gb\nworkloads:\n  - name: a\n    count: zero\n")
    result = CliRunner().invoke(main, ["mig", "plan", str(path)])
    assert result.exit_code == 2
    assert "$.workloads[0].count" in result.output
    path.write_text("gpu: a100-sxm4-80gb\nworkloads:\n  - {name: a, profile: 9g.9gb}\n")
    result = CliRunner().invoke(main, ["mig", "plan", str(path)])
    assert result.exit_code == 2
    assert "$.workloads[0].profile" in result.output
    path.write_text("gpu: t4\nworkloads:\n  - {name: a, profile: 1g.5gb}\n")
    assert "does not support MIG" in CliRunner().invoke(main, ["mig", "plan", str(path)]).output


def test_profiles_command() -> None:
    result = CliRunner().invoke(main, ["mig", "profiles", "RTX PRO 6000 Server"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["table"] == "rtx-pro-6000-96gb"
    assert body["memory_slices"] == 4
