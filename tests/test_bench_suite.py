"""The benchmark suite's entry point: it lists, it runs a fast benchmark end to end, and
the API overhead's request set still matches the API's schema."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench.service.api_overhead import REQUESTS
from litestar import Litestar
from litestar.testing import TestClient

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "service"), str(ROOT)])}


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_list_names_every_benchmark() -> None:
    done = _bench("--list")
    assert done.returncode == 0, done.stderr
    names = {line.split()[0] for line in done.stdout.splitlines()}
    assert {"accuracy", "estimate_speed", "api_overhead", "peers", "mig_packing"} <= names


def test_unknown_benchmark_is_a_usage_error() -> None:
    done = _bench("no_such_bench")
    assert done.returncode == 2
    assert "no_such_bench" in done.stderr


def test_fast_benchmarks_run_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    done = _bench("accuracy", "estimate_speed", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["machine"]["cpus"] == os.cpu_count()
    speed = report["benchmarks"]["estimate_speed"]
    assert speed["status"] == "ok"
    per_call = speed["result"]["median_per_call"]
    assert per_call
    assert all(0 < v["cpu_us"] < 100_000 for v in per_call.values())
    accuracy = report["benchmarks"]["accuracy"]["result"]
    committed = json.loads((ROOT / "bench" / "results" / "accuracy.json").read_text())
    assert accuracy["analytic"]["cases"] == committed["summary"]["cases"]
    assert accuracy["analytic"]["median_abs_error"] == pytest.approx(
        committed["summary"]["median_abs_error"]
    )
    # one table row per figure, on stdout
    assert "| estimate_speed |" in done.stdout
    assert "| accuracy |" in done.stdout
    # --update reruns one and keeps the others, saying when it reran
    again = _bench("estimate_speed", "--out", str(out), "--update")
    assert again.returncode == 0, again.stderr
    updated = json.loads(out.read_text())
    assert updated["benchmarks"]["accuracy"] == report["benchmarks"]["accuracy"]
    assert updated["when"] == report["when"]
    rerun = updated["reruns"]["estimate_speed"]
    assert rerun["command"] == "python -m bench estimate_speed --update"
    assert rerun["when"] >= report["when"]
    assert "| accuracy |" in again.stdout


def test_api_overhead_requests_are_answered_2xx(client: TestClient[Litestar]) -> None:
    """Every request the load test sends is a valid one for a route this app has (a route
    added later, such as /v1/plan, needs its body in bench/requests.toml to match)."""
    paths = client.get("/schema/openapi.json").json()["paths"]
    sent = [r for r in REQUESTS if r["path"] in paths]
    assert {r["path"] for r in sent} >= {"/healthz", "/v1/memory/estimate", "/v1/mig/plan"}
    for request in sent:
        response = client.request(
            request["method"],
            request["path"],
            json=request.get("body"),
            headers=request.get("headers"),
        )
        assert 200 <= response.status_code < 300, (request["name"], response.text[:300])


def test_computed_requests_bypass_the_answer_cache(client: TestClient[Litestar]) -> None:
    """The load test's "computed" rows measure planning, not the cache: each sends
    Cache-Control: no-cache, which the server answers by computing again."""
    from prometheus_client.parser import text_string_to_metric_families

    computed = [r for r in REQUESTS if r["name"].endswith(", computed")]
    assert {r["path"] for r in computed} == {
        "/v1/memory/estimate", "/v1/recommendations", "/v1/mig/plan"
    }  # fmt: skip
    for request in computed:
        for _ in range(2):
            response = client.post(
                request["path"], json=request["body"], headers=request["headers"]
            )
            assert response.status_code == 200
    hits = [
        sample
        for family in text_string_to_metric_families(client.get("/metrics").text)
        for sample in family.samples
        if sample.name == "gpuplan_answer_cache_lookups_total" and sample.value
    ]
    assert hits == []


def test_docs_quote_the_committed_suite_run() -> None:
    """docs/benchmarks.md carries the table of bench/results/suite.json, row for row."""
    from bench.__main__ import table

    report = json.loads((ROOT / "bench" / "results" / "suite.json").read_text())
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    missing = [row for row in table(report).splitlines() if row not in docs]
    assert not missing, missing
    assert report["command"].strip() == "python -m bench all"
