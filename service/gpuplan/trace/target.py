"""Find the user's build function: ``package.module:function`` or ``file.py:function``.

Only the CLI loads targets, on the user's own machine: this is running the user's
code by design. The API never calls this module.
"""

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuplan.trace.step import TraceError


def load_target(target: str) -> Callable[[], Any]:
    """The callable ``target`` names; raises :class:`TraceError` if it cannot be found."""
    where, sep, attribute = target.rpartition(":")
    if not sep or not where or not attribute:
        raise TraceError(
            f"target {target!r} must be package.module:function or path/to/file.py:function"
        )
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise TraceError(f"target file {where} does not exist")
        name = f"gpuplan_trace_target_{abs(hash(path))}"
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TraceError(f"cannot load {where} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        sys.path.insert(0, str(path.parent))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise TraceError(f"cannot import {where}: {exc}") from None
    function: Any = module
    for part in attribute.split("."):
        function = getattr(function, part, None)
        if function is None:
            raise TraceError(f"{where} has no attribute {attribute!r}")
    if not callable(function):
        raise TraceError(f"{target} is not callable")
    return function  # type: ignore[no-any-return]
