"""The architecture's import rules, checked in a fresh interpreter each.

The core must import without the adapters' libraries (and without torch, which is
an optional extra); the serve path must not import prometheus_client before it has
chosen the metrics store for several workers.
"""

import pkgutil
import subprocess
import sys
from pathlib import Path

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


def test_the_job_queue_imports_no_web_framework_and_no_torch() -> None:
    """The API imports the queue's client; workers import torch in their children only."""
    imported = _imported_after(
        "import gpuplan.jobs.queue, gpuplan.jobs.tasks, gpuplan.jobs.metrics, gpuplan.jobs.worker"
    )
    assert not imported & {"litestar", "torch", "transformers", "click"}, imported


def test_serve_path_leaves_prometheus_client_unimported() -> None:
    imported = _imported_after("import gpuplan.cli, gpuplan.config.settings, gpuplan.api.server")
    assert "prometheus_client" not in imported


MAY_IMPORT = {
    "core": {"core"},
    "config": {"config", "core"},
    "fleet": {"fleet", "core"},
    "trace": {"trace", "core"},
    "child": {"child"},
    "agent": {"agent", "child", "core", "fleet"},
    "jobs": {"jobs", "core", "trace"},
    "api": {"api", "child", "config", "core", "fleet", "jobs", "trace"},
    "cli": {"cli", "agent", "config", "core", "fleet", "jobs", "trace"},
}
"""docs/architecture.md's table: the gpuplan packages each package may import."""

CLI_MAY_IMPORT_API = {"cli/commands/serve.py", "cli/commands/openapi.py"}
"""The commands whose subject is the HTTP adapter: running it, printing its document."""


def _gpuplan_imports(path: Path) -> set[str]:
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        found |= {n.split(".")[1] for n in names if n.startswith("gpuplan.") and n.count(".")}
    return found


def test_packages_import_only_what_the_architecture_allows() -> None:
    root = Path(gpuplan.core.__file__).resolve().parent.parent
    broken = []
    for package, allowed in MAY_IMPORT.items():
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            extra = _gpuplan_imports(path) - allowed - {"__init__"}
            if package == "cli" and rel in CLI_MAY_IMPORT_API:
                extra -= {"api"}
            broken += [f"{rel} imports gpuplan.{name}" for name in sorted(extra)]
    assert not broken, broken


def test_no_module_imports_itself_in_a_circle() -> None:
    import ast

    root = Path(gpuplan.core.__file__).resolve().parent.parent
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        module = "gpuplan." + ".".join(path.relative_to(root).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.startswith("gpuplan")
            ):
                deps.add(node.module)
                deps |= {f"{node.module}.{a.name}" for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("gpuplan")}
        graph[module] = deps
    modules = set(graph)
    edges = {m: {d for d in deps if d in modules and d != m} for m, deps in graph.items()}
    # A package's __init__ re-exporting its modules is not a cycle of theirs.
    edges = {m: {d for d in ds if not m.startswith(d + ".")} for m, ds in edges.items()}
    seen: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        seen[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if seen.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in seen and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        seen[node] = 2
        return None

    for module in sorted(modules):
        if module not in seen and (cycle := visit(module)):
            raise AssertionError(" -> ".join(cycle))
