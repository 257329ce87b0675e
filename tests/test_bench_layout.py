"""bench/ shows its parts: each study sits in the folder of what it measures, the suite's
registry names modules that import, and every ``python -m bench...`` command and
``bench/...`` script the docs name is still there (issue 36, item 4).

Moving a study is cheap; a doc, test or GPU session script left pointing at its old
path is found only when someone runs it, often on a machine lent for minutes. These
checks find it here, without running a benchmark."""

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from bench.__main__ import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

# What may sit at bench/'s root besides folders: the suite's entry point, the session
# script of a GPU machine (it runs checks of three folders), the request sets that
# several folders share, and the writer of the docs' figures from every folder's
# results (quote.py). A study goes in the folder of what it measures.
ROOT_SCRIPTS = {"__init__.py", "__main__.py", "gpu_session.sh", "requests.py", "quote.py"}

# Where commands and script paths are written down; CHANGELOG.md is history and keeps
# the paths of its day, results/ records the commands that produced each file.
DOCUMENTS = [
    "README.md",
    "pyproject.toml",
    "docs/**/*.md",
    "bench/**/*.md",
    "bench/**/*.py",
    "bench/**/*.sh",
    "bench/**/*.toml",
    "service/**/*.py",
    "service/**/*.toml",
    "tests/**/*.py",
]
COMMAND = re.compile(r"-m (bench(?:\.\w+)+)")
SCRIPT = re.compile(r"\bbench/[\w/.-]*\.(?:py|sh|toml)\b")


def _found(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package that is not there
        return False


def _documents() -> list[Path]:
    return sorted({p for pattern in DOCUMENTS for p in ROOT.glob(pattern) if p.is_file()})


def test_no_loose_study_at_the_root() -> None:
    loose = sorted(
        p.name for p in BENCH.iterdir() if p.suffix in {".py", ".sh"} and p.name not in ROOT_SCRIPTS
    )
    assert loose == [], f"put {loose} in the folder of what it measures (bench/README.md)"


def test_every_folder_is_a_package() -> None:
    # `python -m bench.<folder>.<study>` needs the folder to be a package
    folders = [
        p for p in BENCH.iterdir() if p.is_dir() and p.name not in {"results", "__pycache__"}
    ]
    assert folders
    assert [p.name for p in folders if not (p / "__init__.py").is_file()] == []


@pytest.mark.parametrize("name", list(BENCHMARKS))
def test_registry_names_a_module_that_imports(name: str) -> None:
    module, function = BENCHMARKS[name].target.split(":")
    assert callable(getattr(importlib.import_module(module), function))


def test_documented_commands_and_scripts_exist() -> None:
    missing = []
    for document in _documents():
        text = document.read_text(encoding="utf-8", errors="replace")
        where = document.relative_to(ROOT)
        missing += [
            f"{where}: python -m {module}"
            for module in sorted(set(COMMAND.findall(text)))
            if not _found(module)
        ]
        missing += [
            f"{where}: {path}"
            for path in sorted(set(SCRIPT.findall(text)))
            if not (ROOT / path).is_file()
        ]
    assert missing == []
