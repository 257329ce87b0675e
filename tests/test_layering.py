"""The architecture's import rules, checked in a fresh interpreter each.

The core must import without the adapters' libraries (and without torch, which is
an optional extra); the serve path must not import prometheus_client before it has
chosen the metrics store for several workers.
"""

import pkgutil
import subprocess
import sys

import gpuplan.core

ADAPTER_LIBRARIES = ("litestar", "redis", "prometheus_client", "torch", "granian", "click")


def _imported_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {name.split(".")[0] for name in out.stdout.split()}


def test_core_imports_no_adapter_library() -> None:
    modules = [m.name for m in pkgutil.walk_packages(gpuplan.core.__path__, "gpuplan.core.")]
    statement = "\n".join(f"import {name}" for name in ["gpuplan.core", *modules])
    leaked = _imported_after(statement) & set(ADAPTER_LIBRARIES)
    assert not leaked, f"gpuplan.core imports {sorted(leaked)}"


def test_core_imports_with_torch_unavailable() -> None:
    modules = [m.name for m in pkgutil.walk_packages(gpuplan.core.__path__, "gpuplan.core.")]
    statement = "sys.modules['torch'] = None\n" + "\n".join(
        f"import {n}" for n in ["gpuplan.core", *modules]
    )
    _imported_after(statement)  # raises CalledProcessError if any core module needs torch


def test_serve_path_leaves_prometheus_client_unimported() -> None:
    imported = _imported_after("import gpuplan.cli, gpuplan.config.settings, gpuplan.api.server")
    assert "prometheus_client" not in imported
