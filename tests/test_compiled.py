"""The compiled build (setup.py with ``GPUPLAN_COMPILE=1``; the API image's): the modules
it compiles can be compiled without changing what they mean, and compiled they give the
recorded answers byte for byte."""

import ast
import importlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from bench.speed.compiled import build, compiled_modules

ROOT = Path(__file__).resolve().parents[1]
MODULES = compiled_modules()


def test_the_list_names_modules_of_the_package() -> None:
    assert len(MODULES) >= 10
    assert len(set(MODULES)) == len(MODULES)
    for name in MODULES:
        assert (ROOT / "service" / (name.replace(".", "/") + ".py")).is_file(), name


@pytest.mark.parametrize("name", MODULES)
def test_a_compiled_module_defines_no_struct_and_no_class_keywords(name: str) -> None:
    """mypyc builds a class it does not compile as a plain ``type(...)`` call without the
    class statement's keyword arguments: a Struct's ``kw_only=True`` or ``frozen=True``
    would silently be gone. So a compiled module defines no Struct, and no class with
    keyword arguments of any kind."""
    module = importlib.import_module(name)
    structs = [
        n
        for n, v in vars(module).items()
        if isinstance(v, type) and issubclass(v, msgspec.Struct) and v.__module__ == name
    ]
    assert not structs, f"{name} defines {structs}: move them to a module that is not compiled"
    path = ROOT / "service" / (name.replace(".", "/") + ".py")
    keyworded = [
        node.name
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.keywords
    ]
    assert not keyworded, f"{name}: classes with keyword arguments {keyworded}"


@pytest.mark.parametrize("name", MODULES)
def test_a_compiled_function_puts_its_defaults_last(name: str) -> None:
    """mypyc writes each compiled function's signature for its docstring as positional
    parameters in the order declared, and the build fails ("non-default argument follows
    default argument") where a keyword-only parameter without a default follows one with
    a default, although Python allows it: such a function lists its defaults last."""
    path = ROOT / "service" / (name.replace(".", "/") + ".py")
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            positional = a.posonlyargs + a.args
            has_default = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
            has_default += [d is not None for d in a.kw_defaults]
            first = has_default.index(True) if True in has_default else len(has_default)
            if not all(has_default[first:]):
                bad.append(f"{node.name} (line {node.lineno})")
    assert not bad, f"{name}: a parameter without a default follows one with a default in {bad}"


@pytest.mark.skipif(
    os.environ.get("GPUPLAN_EXPECT_COMPILED") != "1",
    reason="checks an interpreter that runs the compiled build (test_the_compiled_build_*)",
)
def test_every_listed_module_is_loaded_compiled() -> None:
    pure = [
        name
        for name in MODULES
        if not isinstance(
            importlib.import_module(name).__loader__, importlib.machinery.ExtensionFileLoader
        )
    ]
    assert not pure


def _cannot_build() -> str | None:
    """Why this interpreter cannot build the compiled wheel, or None."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed (the dev extra's mypy brings it)"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler (Debian: apt-get install gcc)"
    if importlib.util.find_spec("setuptools.command.bdist_wheel") is None and (
        importlib.util.find_spec("wheel") is None
    ):
        return "setuptools before 70.1 without the wheel package cannot build a wheel"
    return None


CANNOT_BUILD = _cannot_build()


@pytest.mark.slow
@pytest.mark.skipif(CANNOT_BUILD is not None, reason=str(CANNOT_BUILD))
def test_the_compiled_build_gives_the_recorded_answers(tmp_path: Path) -> None:
    """Build the wheel as the image does and run, under it, the tests that hold the
    answers to their recorded bytes and the search's shortcuts to their exhaustive
    twins; the first checks that the interpreter really imports the compiled modules.
    The C compiler runs at ``-O0`` here (the image's is ``-O3``): mypyc's C is the same,
    and what this checks is what it means, not how fast it runs (bench.speed.compiled
    times the ``-O3`` build); it saves about 90 s of the slow tier's CPU."""
    site = build(tmp_path, opt_level="0")
    env = {
        **os.environ,
        "PYTHONPATH": f"{site}{os.pathsep}{ROOT}",
        "GPUPLAN_EXPECT_COMPILED": "1",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "tests/test_compiled.py::test_every_listed_module_is_loaded_compiled",
            "tests/test_recommend_identical.py",
            "tests/test_search_shortcuts.py",
            "tests/test_serving_load.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.splitlines()[-1]
    assert " passed" in summary
    assert "skipped" not in summary
