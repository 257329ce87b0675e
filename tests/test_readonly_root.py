"""The pod's filesystem, reproduced: a read-only root and an empty writable /tmp.

The chart runs the API with ``readOnlyRootFilesystem: true`` and mounts an emptyDir on
/tmp. This test builds the same view without a container runtime (a user and mount
namespace: the root bind-mounted read-only, a tmpfs on /tmp, chroot) and serves real
requests with two granian workers, which share their metrics through files under /tmp.
Without the /tmp mount the same start fails, which is why the chart mounts it.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent

_SETUP = """
set -e
mount --rbind / "$VIEW"
mount -o remount,bind,ro "$VIEW"
if [ "$WITH_TMP" = 1 ]; then
    mount -t tmpfs -o size=64m tmpfs "$VIEW/tmp"
    # A checkout or interpreter that itself lives under /tmp (a CI clone) stays visible,
    # read-only, as the image's /app would be.
    for keep in $KEEP; do
        mkdir -p "$VIEW$keep"
        mount --rbind "$keep" "$VIEW$keep"
        mount -o remount,bind,ro "$VIEW$keep"
    done
fi
exec chroot "$VIEW" /bin/sh -c "$INNER"
"""

_CLIENT = """
import sys, time, urllib.request
base = "http://127.0.0.1:%s"
deadline = time.monotonic() + 30
while True:
    try:
        urllib.request.urlopen(base + "/healthz", timeout=1).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("the API did not start")
        time.sleep(0.2)
for path in ("/readyz", "/v1/gpus", "/v1/gpus", "/metrics"):
    body = urllib.request.urlopen(base + path, timeout=5).read().decode()
print(body)
try:
    open("/probe-write", "w")
    sys.exit("the root is writable")
except OSError:
    pass
"""


def _namespaces_work() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    done = subprocess.run([unshare, "-rm", "true"], capture_output=True, check=False)
    return done.returncode == 0


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _namespaces_work(), reason="user and mount namespaces are not available here"
    ),
]


def _under_tmp() -> list[str]:
    """The checkout and interpreter directories that a tmpfs on /tmp would hide."""
    named = [ROOT, Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent]
    paths = {str(p) for p in named} | {str(p.resolve()) for p in named}
    return sorted(p for p in paths if p == "/tmp" or p.startswith("/tmp/"))


def _serve_in_read_only_root(
    view: Path, with_tmp: bool, client: bool = True
) -> subprocess.CompletedProcess[str]:
    port = free_port()
    server = (
        f"cd {ROOT}; PYTHONPATH={ROOT / 'service'} GPUPLAN_HOST=127.0.0.1 GPUPLAN_PORT={port} "
        f"GPUPLAN_WORKERS=2 TMPDIR=/tmp HOME=/nonexistent timeout -k 5 40 {sys.executable} -m gpuplan serve"
    )
    # `timeout` passes the kill on to the server, so the namespace empties at the end.
    inner = server  # alone, it must fail at once
    if client:
        script = _CLIENT % port
        inner = f"{server} & pid=$!; {sys.executable} -c '{script}'; rc=$?; kill $pid; wait $pid; exit $rc"
    return subprocess.run(
        ["unshare", "-rm", "--propagation", "private", "bash", "-c", _SETUP],
        env={
            "WITH_TMP": "1" if with_tmp else "0",
            "INNER": inner,
            "VIEW": str(view),
            "KEEP": " ".join(_under_tmp()),
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        },
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def test_api_serves_from_a_read_only_root_with_a_writable_tmp(tmp_path: Path) -> None:
    done = _serve_in_read_only_root(tmp_path, with_tmp=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # Both workers' counts reach /metrics through the files in /tmp.
    assert 'gpuplan_http_requests_total{method="GET",route="/v1/gpus",status="200"} 2.0' in (
        done.stdout
    )


def test_without_a_writable_tmp_two_workers_cannot_start(tmp_path: Path) -> None:
    done = _serve_in_read_only_root(tmp_path, with_tmp=False, client=False)
    assert done.returncode != 0
    assert "No usable temporary directory" in done.stderr
