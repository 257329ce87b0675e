"""Alert rules and Grafana dashboards against promtool and against our real /metrics.

Every PromQL expression (alert rules, dashboard panels, template variables) must parse
(promtool) and may name only series our code exports. The exported names come from live
scrapes: the API through the real app, the agent in CPU mode serving /metrics over HTTP,
the agent replaying a recorded GPU node (telemetry and MIG), and, because no GPU runs
benchmarks here, the agent's exporter over a snapshot carrying a GPU benchmark report.
"""

import asyncio
import json
import re
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from litestar.testing import TestClient
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.agent.config import AgentConfig
from gpuplan.agent.exporter import registry_for
from gpuplan.agent.loop import Agent
from gpuplan.agent.state import AgentState
from gpuplan.agent.telemetry import NoGpuSource
from gpuplan.api.app import create_app
from gpuplan.config.settings import Settings
from gpuplan.core.catalog import builtin_catalog
from tests.agent_fixtures import replay_source, snapshot

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "deploy" / "prometheus" / "gpuplan.rules.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "gpuplan.rules.test.yaml"
DASHBOARDS = sorted((ROOT / "deploy" / "grafana").glob("*.json"))
# Series Prometheus itself writes for every target.
PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


def _promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool is not installed (Debian: apt-get install -y prometheus)")
    return binary


def _run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args], capture_output=True, text=True, timeout=60, check=False, cwd=cwd
    )


# --- what the code exports -------------------------------------------------------------


def _names(exposition: str) -> set[str]:
    """Sample names (``_bucket``, ``_total`` ... included) of a text exposition."""
    return {
        sample.name
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
    }


def _api_scrape() -> str:
    with TestClient(app=create_app(Settings())) as client:
        # A success, a client error and an unmatched path, so every label shape appears.
        assert client.get("/v1/gpus").status_code == 200
        assert client.post("/v1/memory/estimate", json={}).status_code >= 400
        client.get("/v1/nothing")
        response = client.get("/metrics")
    assert response.status_code == 200
    return response.text


async def _scrape_running_agent(agent: Agent, ready: Any) -> str:
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop))
    try:
        for _ in range(1200):
            if agent.metrics_port and ready(agent.state):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the agent did not get ready")
        url = f"http://127.0.0.1:{agent.metrics_port}/metrics"
        return await asyncio.to_thread(
            lambda: urllib.request.urlopen(url, timeout=5).read().decode()
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


def _cpu_agent_scrape() -> str:
    """The agent in CPU mode after one real (tiny) benchmark, scraped over HTTP."""
    config = AgentConfig(node="cpu-node", metrics_host="127.0.0.1", metrics_port=0,
                         interval_seconds=0.2, backend="none", cpu_matmul_size=64,
                         cpu_copy_bytes=2**20, cpu_threads=1, matmul_warmup=1)  # fmt: skip
    agent = Agent(config, NoGpuSource(), builtin_catalog())
    return asyncio.run(
        _scrape_running_agent(
            agent, lambda s: s.snapshot is not None and s.snapshot.benchmark is not None
        )
    )


def _recorded_gpu_agent_scrape() -> str:
    """The agent replaying a recorded HGX H200 node (NVLink, MIG, a lost GPU)."""
    config = AgentConfig(node="gpu-node", metrics_host="127.0.0.1", metrics_port=0,
                         interval_seconds=0.2, benchmark=False, redis_url=None)  # fmt: skip
    source, _ = replay_source("hgx-h200")
    agent = Agent(config, source, builtin_catalog())
    return asyncio.run(_scrape_running_agent(agent, lambda s: s.snapshot is not None))


def _gpu_benchmark_exposition() -> str:
    """The exporter over a snapshot with a GPU benchmark report (rates made up, shape real)."""
    state = AgentState(node="node-a", backend="nvidia", snapshot=snapshot("node-a"))
    state.redis_configured = True
    state.benchmark_runs["ok"] += 1
    state.last_benchmark_success_ts = 1.7e9
    return generate_latest(registry_for(state)).decode()


@pytest.fixture(scope="module")
def exported() -> set[str]:
    names = set(PROMETHEUS_SERIES)
    for exposition in (
        _api_scrape(),
        _cpu_agent_scrape(),
        _recorded_gpu_agent_scrape(),
        _gpu_benchmark_exposition(),
    ):
        names |= _names(exposition)
    return names


# --- what the rules and dashboards query -----------------------------------------------

_GRAFANA_RANGES = re.compile(
    r"\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}"
)
_GRAFANA_VARS = re.compile(r"\$\{?\w+(:\w+)?\}?")
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGES = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w.:])([a-zA-Z_:][\w:]*+)(?!\s*\()")  # *+: no backtracking into a name
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
             "group_left", "group_right", "inf", "nan", "atan2"}  # fmt: skip


def _as_promql(expr: str) -> str:
    """A dashboard expression with Grafana's variables replaced, for promtool."""
    expr = _GRAFANA_RANGES.sub("5m", expr)
    return _GRAFANA_VARS.sub(".*", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects.

    Strings, label matchers, grouping clauses and ranges are cut out first; what remains
    as an identifier not followed by "(" (a function or an aggregation) is a metric name.
    """
    text = _STRINGS.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    text = _RANGES.sub(" ", text)
    return {name for name in _IDENT.findall(text) if name not in _KEYWORDS}


def test_metric_name_extraction() -> None:
    expr = (
        'quantile by (model_name, dtype) (0.5, a_metric{gpu!="cpu", x=~"b_metric"}) / 1e12 '
        "+ on (node) group_left (model) sum(rate(c_total[5m])) or vector(0) * time() "
        '- histogram_quantile(0.99, sum by (le) (rate(d_bucket{route!="/v1/x"}[5m]))) and e:rec'
    )
    assert metric_names(expr) == {"a_metric", "c_total", "d_bucket", "e:rec"}


def _rule_expressions() -> list[tuple[str, str]]:
    rules = yaml.safe_load(RULES.read_text())
    return [(r["alert"], r["expr"]) for g in rules["groups"] for r in g["rules"]]


def _dashboard(path: Path) -> dict[str, Any]:
    board: dict[str, Any] = json.loads(path.read_text())
    return board


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for panel in board["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def _dashboard_expressions() -> list[tuple[str, str]]:
    found = []
    for path in DASHBOARDS:
        board = _dashboard(path)
        for panel in _panels(board):
            for target in panel.get("targets", []):
                found.append((f"{path.name}: {panel['title']} {target['refId']}", target["expr"]))
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"])
                assert match, var["definition"]
                found.append((f"{path.name}: ${var['name']}", match.group(1)))
    return found


def test_every_rule_and_panel_queries_only_exported_metrics(exported: set[str]) -> None:
    expressions = _rule_expressions() + _dashboard_expressions()
    assert len(expressions) > 50
    unknown = {
        where: sorted(metric_names(expr) - exported)
        for where, expr in expressions
        if metric_names(expr) - exported
    }
    assert unknown == {}
    used = set().union(*(metric_names(expr) for _, expr in expressions))
    # The dashboards really cover the agent and the API (not just a token panel each).
    assert len({n for n in used if n.startswith("gpuplan_agent_")}) >= 30
    assert {n for n in used if n.startswith("gpuplan_http_")} >= {
        "gpuplan_http_requests_total", "gpuplan_http_request_duration_seconds_bucket",
    }  # fmt: skip


def test_the_exported_set_is_real(exported: set[str]) -> None:
    # Guards the test above against a scrape that silently returned nothing.
    assert {
        "gpuplan_http_requests_total",  # the API
        "gpuplan_http_request_duration_seconds_bucket",
        "gpuplan_agent_benchmark_last_success_timestamp_seconds",  # the CPU agent's benchmark
        "gpuplan_agent_mig_instance_info",  # the recorded MIG GPU
        "gpuplan_agent_mig_instance_sm_activity_ratio",  # its GPM, per GPU instance
        "gpuplan_agent_gpu_sm_activity_ratio",
        "gpuplan_agent_nvlink_bytes_total",
        "gpuplan_agent_matmul_peak_ratio",  # the GPU benchmark report
    } <= exported
    assert "gpuplan_agent_made_up_metric" not in exported


def test_every_expression_parses(tmp_path: Path) -> None:
    groups = [
        {
            "name": "dashboards",
            "rules": [
                {"record": f"gpuplan:dashboard_check:{i}", "expr": _as_promql(expr)}
                for i, (_, expr) in enumerate(_dashboard_expressions())
            ],
        }
    ]
    path = tmp_path / "dashboards.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    for rules_file in (path, RULES):
        result = _run("check", "rules", str(rules_file))
        assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_rejects_a_broken_expression(tmp_path: Path) -> None:
    # The check above can fail: promtool exits non-zero on bad PromQL.
    path = tmp_path / "bad.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "x", "rules": [
        {"record": "x:y", "expr": _as_promql("sum(rate(gpuplan_http_requests_total[$__rate_interval])")}
    ]}]}))  # fmt: skip
    assert _run("check", "rules", str(path)).returncode != 0


def test_alert_rule_unit_tests() -> None:
    result = _run("test", "rules", RULE_TESTS.name, cwd=RULE_TESTS.parent)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", RULE_TESTS.read_text()))
    assert tested == {name for name, _ in _rule_expressions()}, "every alert has a unit test"


# --- dashboard structure ---------------------------------------------------------------


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path: Path) -> None:
    board = _dashboard(path)
    assert board["uid"] == path.stem
    assert board["schemaVersion"] >= 36
    panels = _panels(board)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
        if panel["type"] == "row":
            continue
        # Every query goes to the chosen data source, never a hard-coded one.
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        assert panel.get("description"), panel["title"]
        for target in panel["targets"]:
            for name in re.findall(r"\$\{?(\w+)", target["expr"]):
                assert name.startswith("__") or name in variables, (panel["title"], name)


def test_fleet_and_mig_dashboards_filter_by_node_and_gpu_model() -> None:
    for name in ("gpuplan-fleet.json", "gpuplan-mig.json"):
        board = _dashboard(ROOT / "deploy" / "grafana" / name)
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert {"node", "model"} <= set(variables)
        assert "model_name" in variables["model"]["definition"]


def test_fleet_dashboard_compares_measured_with_peak() -> None:
    board = _dashboard(ROOT / "deploy" / "grafana" / "gpuplan-fleet.json")
    exprs = " ".join(t["expr"] for p in _panels(board) for t in p.get("targets", []))
    for metric in ("gpuplan_agent_matmul_flops_per_second", "gpuplan_agent_matmul_peak_flops_per_second",
                   "gpuplan_agent_gpu_utilization_ratio", "gpuplan_agent_memory_used_bytes",
                   "gpuplan_agent_power_watts", "gpuplan_agent_nvlink_bytes_total",
                   "gpuplan_agent_pcie_throughput_bytes_per_second",
                   "gpuplan_agent_benchmark_last_success_timestamp_seconds"):  # fmt: skip
        assert metric in exprs


def test_fleet_dashboard_has_a_mig_activity_row() -> None:
    """SM, tensor and DRAM activity per MIG instance (GPM), labelled by GPU and compute
    instance, in a row of its own; and GPM's SM activity beside utilization.gpu."""
    board = _dashboard(ROOT / "deploy" / "grafana" / "gpuplan-fleet.json")
    panels = _panels(board)
    (row,) = [p for p in panels if p["type"] == "row" and "MIG" in p["title"]]
    below = sorted(
        (p for p in panels if p["type"] != "row" and p["gridPos"]["y"] > row["gridPos"]["y"]),
        key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]),
    )
    rows_after = [p["gridPos"]["y"] for p in panels
                  if p["type"] == "row" and p["gridPos"]["y"] > row["gridPos"]["y"]]  # fmt: skip
    mine = [p for p in below if not rows_after or p["gridPos"]["y"] < min(rows_after)]
    exprs = {t["expr"].split("{")[0]: t["legendFormat"] for p in mine for t in p["targets"]}
    for kind in ("sm", "tensor", "dram"):
        legend = exprs[f"gpuplan_agent_mig_instance_{kind}_activity_ratio"]
        assert "{{gpu_instance_id}}" in legend
        assert "{{compute_instance_id}}" in legend
    assert {"gpuplan_agent_gpu_sm_activity_ratio", "gpuplan_agent_gpu_utilization_ratio"} <= set(
        exprs
    )


def _free_slices_expr() -> str:
    board = _dashboard(ROOT / "deploy" / "grafana" / "gpuplan-mig.json")
    (panel,) = [p for p in _panels(board) if p["title"] == "Free compute slices per MIG GPU"]
    return str(panel["targets"][0]["expr"])


def test_free_mig_slices_evaluate_correctly(tmp_path: Path) -> None:
    """The MIG dashboard's slice arithmetic, evaluated by promtool on known layouts."""
    info = "gpuplan_agent_mig_instance_info"
    gpu = 'node="n1", model_name="NVIDIA H100 80GB HBM3"'
    a30 = 'node="n2", model_name="NVIDIA A30"'
    series = [
        # H100 GPU 0: 3g + 2g + 1g used, 1 slice free. GPU 1: MIG on, empty, 7 free.
        (f'gpuplan_agent_mig_enabled{{{gpu}, gpu="0"}}', "1x5"),
        (f'gpuplan_agent_mig_enabled{{{gpu}, gpu="1"}}', "1x5"),
        (f'{info}{{{gpu}, gpu="0", profile="3g.40gb", mig_uuid="a"}}', "1x5"),
        (f'{info}{{{gpu}, gpu="0", profile="2g.20gb", mig_uuid="b"}}', "1x5"),
        (f'{info}{{{gpu}, gpu="0", profile="1g.10gb", mig_uuid="c"}}', "1x5"),
        # H100 GPU 2: MIG off, not listed.
        (f'gpuplan_agent_mig_enabled{{{gpu}, gpu="2"}}', "0x5"),
        # A30: 4 slices, one 2g used.
        (f'gpuplan_agent_mig_enabled{{{a30}, gpu="0"}}', "1x5"),
        (f'{info}{{{a30}, gpu="0", profile="2g.12gb", mig_uuid="d"}}', "1x5"),
    ]
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series],
            "promql_expr_test": [{
                "expr": _as_promql(_free_slices_expr()),
                "eval_time": "2m",
                "exp_samples": [
                    {"labels": '{node="n1", gpu="0"}', "value": 1},
                    {"labels": '{node="n1", gpu="1"}', "value": 7},
                    {"labels": '{node="n2", gpu="0"}', "value": 2},
                ],
            }],
        }],
    }  # fmt: skip
    path = tmp_path / "free_slices.test.yaml"
    path.write_text(yaml.safe_dump(test))
    result = _run("test", "rules", path.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
