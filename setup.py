"""The build's one dynamic part: with ``GPUPLAN_COMPILE=1`` the modules that
``[tool.gpuplan] compiled`` in pyproject.toml lists are compiled with mypyc, which turns
their typed Python into C extensions (the Dockerfile's API image is built so). Without it
the package is pure Python, as an editable install must be: an extension module beside
its source would shadow every later edit of that source.

Everything else about the package is declared in pyproject.toml.
"""

import os
import tomllib
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent


def compiled_modules() -> list[str]:
    """The source files to compile, relative to the repository root."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [f"service/{path}" for path in config["tool"]["gpuplan"]["compiled"]]


def ext_modules() -> list[Extension]:
    if os.environ.get("GPUPLAN_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    # The C compiler's optimization level, 3 unless GPUPLAN_COMPILE_OPT says otherwise:
    # the image is built at 3; tests/test_compiled.py builds at 0, the same C code in
    # half the C compiler's time, to check what the compiled modules answer.
    opt_level = os.environ.get("GPUPLAN_COMPILE_OPT", "3")
    if opt_level not in ("0", "1", "2", "3"):
        raise SystemExit(f"GPUPLAN_COMPILE_OPT must be 0, 1, 2 or 3, not {opt_level!r}")
    return mypycify(compiled_modules(), opt_level=opt_level)


setup(ext_modules=ext_modules())
