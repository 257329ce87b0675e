"""The real server in a subprocess: it answers, and SIGTERM stops it promptly."""

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port

pytestmark = pytest.mark.slow


@contextmanager
def serving(
    *args: str, settings: dict[str, str] | None = None, printed: list[str] | None = None
) -> Iterator[str]:
    """``gpuplan serve`` with ``args``, its environment the tests' without any
    ``GPUPLAN_`` setting but ``settings``; ``printed`` receives the two lines it prints
    before the server starts (the page's and the reference's addresses)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPLAN_", "PROMETHEUS_"))}
    env.update(settings or {})
    # A worker still starting when SIGTERM lands ignores the stop (a granian race); the
    # shutdown timeout kills it, so the server stops within it either way.
    env["GPUPLAN_SHUTDOWN_TIMEOUT_SECONDS"] = "2"
    process = subprocess.Popen(
        [sys.executable, "-m", "gpuplan", "serve", "--port", str(port), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=1):
                    break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    output = process.stdout.read().decode() if process.stdout else ""
                    raise AssertionError(f"server did not come up:\n{output}") from None
                time.sleep(0.1)
        if printed is not None and process.stdout is not None:
            printed += [process.stdout.readline().decode().rstrip("\n") for _ in range(2)]
        yield base
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = process.wait(timeout=10)
        assert time.monotonic() - started < 5, "server took over 5 s to stop after SIGTERM"
        assert code == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def test_serve_answers_and_stops_on_sigterm() -> None:
    with serving() as base:
        status, body = _get(f"{base}/healthz")
        assert status == 200
        assert body == b'{"status":"ok"}'


def test_two_workers_report_one_set_of_metrics() -> None:
    # SIGTERM follows the first answers at once, often while the second worker is still
    # starting: the race the shutdown timeout bounds.
    with serving("--workers", "2") as base:
        for _ in range(20):
            _get(f"{base}/v1/version")
        _, text = _get(f"{base}/metrics")
    total = 0.0
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if (
                sample.name == "gpuplan_http_requests_total"
                and sample.labels["route"] == "/v1/version"
            ):
                total += sample.value
    # Whichever worker answered /metrics, it reports the requests of both.
    assert total == 20


def test_serve_prints_the_page_and_the_reference_and_both_answer() -> None:
    printed: list[str] = []
    with serving(printed=printed) as base:
        assert printed == [
            f"gpuplan serve: the planner page is at {base}/ui",
            f"gpuplan serve: the API reference is at {base}/schema",
        ]
        for line in printed:
            status, body = _get(line.rsplit(" ", 1)[1])
            assert status == 200
            assert b"<html" in body.lower()
