"""The serving half of the published corpus (bench/published/runs.toml, issue 34 item 6):
at least 40 measurements from at least 8 independent publications, each with its
citation, exact quote and measure; and the committed AIConfigurator comparison
(bench/results/peers_serving.json) parses and covers exactly the runs it claims."""

import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from bench.peers.serving import SYSTEMS, NotCovered, case_for
from bench.published import runs as published

ROOT = Path(__file__).resolve().parents[1]
PEERS_SERVING = ROOT / "bench" / "results" / "peers_serving.json"
MODELS = ROOT / "service" / "gpuplan" / "core" / "memory" / "data" / "models.toml"
CITATION = re.compile(r"commit [0-9a-f]{40}|https?://\S+|table", re.I)
"""A run's citation names a repository commit, a page's address, or a paper's table."""


def _serving() -> list[dict[str, Any]]:
    return [r for r in published.load_all() if r.get("kind") == "inference"]


def test_serving_corpus_has_40_runs_from_8_sources() -> None:
    runs = _serving()
    assert len(runs) >= 40
    assert len({r["source_id"] for r in runs}) >= 8


def test_every_serving_run_is_cited_quoted_and_measured() -> None:
    for run in _serving():
        assert CITATION.search(str(run["source"])), run["id"]
        assert str(run["quote"]).strip(), run["id"]
        assert run["measure"] in published.SERVING_MEASURES, run["id"]
        assert float(run["value"]) > 0, run["id"]
        assert published.SOURCE_ID.match(str(run["source_id"])), run["id"]


def test_a_static_batch_and_a_load_test_are_told_apart() -> None:
    """Each run says, through its request, which latency it measured: a static batch
    (``workload.batch_size`` > 1, or one request at a time) or in-flight batching at a
    concurrency; both kinds are in the corpus."""
    kinds = set()
    for run in _serving():
        request = run["request"]
        batch = request["workload"].get("batch_size", 1)
        concurrency = request.get("inference", {}).get("max_concurrency")
        kinds.add("static" if batch > 1 or concurrency == 1 else "load")
    assert kinds == {"static", "load"}


def test_peer_results_parse_and_cover_the_runs_they_claim() -> None:
    result = json.loads(PEERS_SERVING.read_text(encoding="utf-8"))
    runs = {str(r["id"]): r for r in _serving()}
    rows = result["rows"]
    claimed = {r["id"] for r in rows}
    skipped = {s["id"] for s in result["not_covered"]}
    assert claimed <= runs.keys()
    assert skipped <= runs.keys()
    assert not claimed & skipped
    assert result["covered"] == len(rows)
    presets = tomllib.loads(MODELS.read_text(encoding="utf-8"))["models"]
    for row in rows:
        run = runs[row["id"]]
        assert row["measure"] == run["measure"]
        assert row["measured"] == float(run["value"])
        assert row["gpu"] in SYSTEMS
        assert case_for(run, presets)["mode"] == row["mode"]
        if row["aiconfigurator"] is not None:
            assert math.isclose(row["aic_error"], row["aiconfigurator"] / row["measured"] - 1)
    for run_id in skipped:
        try:
            case_for(runs[run_id], presets)
        except NotCovered:
            continue
        raise AssertionError(f"{run_id} is listed as not covered but AIConfigurator can take it")
    both = [r for r in rows if r["aic_error"] is not None and r["cv_error"] is not None]
    assert result["summary"]["all"]["runs"] == len(both) > 0
