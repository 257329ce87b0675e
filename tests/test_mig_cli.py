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
    result = CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "json"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["gpu"] == "a100-sxm4-80gb"
    assert body["gpus_used"] == body["lower_bound"]


def test_plan_prints_a_table_by_default(tmp_path: Path) -> None:
    """A person reads the GPUs, their instances and the resources, not 250 lines of JSON."""
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN)
    result = CliRunner().invoke(main, ["mig", "plan", str(path)])
    assert result.exit_code == 0, result.output
    answer = json.loads(
        CliRunner().invoke(main, ["mig", "plan", str(path), "--output", "json"]).output
    )
    lines = result.output.splitlines()
    n = answer["gpus_used"]
    assert lines[0] == (
        f"a100-sxm4-80gb (MIG table a100-80gb): {n} GPUs, the fewest that hold these workloads"
    )
    # One line per GPU, one per instance under it, as the answer places them.
    assert [line for line in lines if line.startswith("gpu ")] == [
        f"gpu {g['index']}  {g['layout']}  create in this order: {', '.join(g['creation_order'])}"
        for g in answer["gpus"]
    ]
    slots = [line.split() for line in lines if line.startswith("    slot ")]
    placed = [
        (str(i["start"]), i["profile"], i["workload"])
        for g in answer["gpus"]
        for i in g["instances"]
    ]
    assert [(s[1], s[2], s[5]) for s in slots] == placed
    assert "  infer  nvidia.com/mig-" in result.output
    assert "  train  nvidia.com/mig-3g.40gb x2" in result.output
    assert "migStrategy single: not possible" in result.output
    assert len(lines) < 30  # the JSON runs to hundreds


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


def test_the_table_docs_mig_md_quotes_is_what_the_command_prints(tmp_path: Path) -> None:
    doc = (Path(__file__).parent.parent / "docs" / "mig.md").read_text(encoding="utf-8")
    body = doc[doc.index("<<'EOF'\n") + 8 :]
    request = json.loads(body[: body.index("\nEOF\n")])
    quoted = doc[doc.index("$ gpuplan mig plan workloads.yaml\n") :]
    quoted = quoted[quoted.index("\n") + 1 : quoted.index("```")]
    path = tmp_path / "workloads.yaml"
    path.write_text(yaml.safe_dump(request))
    assert CliRunner().invoke(main, ["mig", "plan", str(path)]).output == quoted
