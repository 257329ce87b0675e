"""The gpuplan command: help everywhere, version, openapi, refused settings."""

import json

import pytest
import yaml
from click.testing import CliRunner

from gpuplan import __version__
from gpuplan.cli import main


@pytest.mark.parametrize(
    "args", [["--help"], ["serve", "--help"], ["openapi", "--help"], ["version", "--help"]]
)
def test_help_everywhere(args: list[str]) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_version() -> None:
    assert CliRunner().invoke(main, ["version"]).output.strip() == __version__
    assert __version__ in CliRunner().invoke(main, ["--version"]).output


def test_openapi_yaml_and_json(tmp_path: object) -> None:
    runner = CliRunner()
    as_yaml = yaml.safe_load(runner.invoke(main, ["openapi"]).output)
    as_json = json.loads(runner.invoke(main, ["openapi", "--format", "json"]).output)
    assert as_yaml == as_json
    assert as_yaml["openapi"] == "3.1.0"


def test_serve_refuses_an_invalid_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPLAN_MAX_BODY_BYTES", "tiny")
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 2
    assert "GPUPLAN_MAX_BODY_BYTES" in result.output


def test_serve_refuses_a_bad_port_option() -> None:
    result = CliRunner().invoke(main, ["serve", "--port", "0"])
    assert result.exit_code == 2
    assert "GPUPLAN_PORT" in result.output


def test_serve_refuses_a_bad_catalog_file(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "gpus.toml"
    path.write_text('[[gpu]]\nid = "h100-sxm5-80gb"\ntdp_watts = "hot"\n')
    monkeypatch.setenv("GPUPLAN_CATALOG_FILE", str(path))
    result = CliRunner().invoke(main, ["serve"])
    assert result.exit_code == 2
    assert "h100-sxm5-80gb" in result.output
    assert "tdp_watts" in result.output


def test_the_progress_line_is_drawn_on_a_terminal_only() -> None:
    import io

    from gpuplan.cli.remote import Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    progress = Progress("gpuplan trace", terminal)
    progress.show("queued")
    progress.show("running")
    progress.done("done")
    text = terminal.getvalue()
    assert text.startswith("\rgpuplan trace: queued (0 s)")
    assert "\rgpuplan trace: running (0 s)" in text
    # The last state overwrites a longer one in full, then the line ends.
    assert text.endswith("\rgpuplan trace: done (0 s)   \n")
    pipe = io.StringIO()
    silent = Progress("gpuplan plan", pipe)
    silent.show("queued")
    silent.done("done")
    assert pipe.getvalue() == ""


@pytest.mark.parametrize(
    ("host", "base"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000"),
        ("0.0.0.0", "http://127.0.0.1:8000"),  # a wildcard is no address a browser opens
        ("::", "http://[::1]:8000"),
        ("::1", "http://[::1]:8000"),
        ("gpuplan.internal", "http://gpuplan.internal:8000"),
    ],
)
def test_serve_names_the_page_and_the_reference(host: str, base: str) -> None:
    from gpuplan.cli.commands.serve import addresses

    assert addresses(host, 8000) == [
        f"gpuplan serve: the planner page is at {base}/ui",
        f"gpuplan serve: the API reference is at {base}/schema",
    ]
