"""The session-end check of tests/conftest.py: a run that leaves keys without an expiry
in the shared Redis fails, naming them, and removes them."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis

from tests.conftest import SHARED_REDIS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parent.parent


def _run(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_inner.py"
    test.write_text(textwrap.dedent(body))
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(test), "-p", "tests.conftest", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip


def test_a_key_left_without_expiry_fails_the_run(redis_url: str, tmp_path: Path) -> None:
    if redis_url != SHARED_REDIS:
        pytest.skip("the check watches the machine's shared Redis, which does not answer")
    ran = _run(
        tmp_path,
        """
        import redis
        from tests.conftest import RUN_PREFIX, SHARED_REDIS

        def test_leaks():
            store = redis.Redis.from_url(SHARED_REDIS)
            store.set(RUN_PREFIX + "leaked", 1)
            store.set(RUN_PREFIX + "expires", 1, ex=60)
        """,
    )
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert "1 Redis key(s) left behind by this run" in ran.stdout
    leaked = next(
        line.strip() for line in ran.stdout.splitlines() if line.strip().endswith(":leaked")
    )
    assert not redis.Redis.from_url(SHARED_REDIS).exists(leaked)  # removed once named


def test_a_run_that_cleans_up_passes(redis_url: str, tmp_path: Path) -> None:
    ran = _run(
        tmp_path,
        """
        def test_uses_its_prefix(redis_url, key_prefix):
            import redis
            redis.Redis.from_url(redis_url).set(key_prefix + "kept-until-teardown", 1)
        """,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "left behind" not in ran.stdout
