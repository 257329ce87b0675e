"""The agent's Prometheus exposition: names, units, labels, and promtool's verdict."""

import asyncio
import re
import shutil
import subprocess
import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuplan.agent.exporter import bound_port, registry_for, serve_metrics
from gpuplan.agent.state import AgentState
from gpuplan.core.fleet import BenchmarkReport, CopyResult, CpuInfo, MatmulResult, NodeSnapshot
from tests.agent_fixtures import snapshot


def _state() -> AgentState:
    state = AgentState(node="node-a", backend="nvidia", snapshot=snapshot("node-a"))
    state.collects, state.collect_duration_seconds, state.last_collect_ts = 3, 0.004, 1.7e9
    state.collector_errors.update({"not_supported": 6, "gpu_lost": 1})
    state.redis_configured, state.redis_connected = True, False
    state.redis_publish_failures = 2
    state.benchmark_runs["partial"] += 1
    return state


def _cpu_state() -> AgentState:
    """A CPU-mode node after its first benchmark."""
    report = BenchmarkReport(
        ts=1.7e9, status="ok", duration_seconds=4.5, torch_version="2.13.0+cpu",
        matmul=[MatmulResult(device="cpu", model_name="AMD EPYC", dtype=d, m=256, n=256, k=256,
                             iterations=50, flops_per_second=1e11, max_flops_per_second=1.1e11)
                for d in ("fp64", "fp32", "bf16", "fp16")],
        copy=[CopyResult(device="cpu", model_name="AMD EPYC", kind="host_memcpy",
                         path="host_memory", size_bytes=2**25, bytes_per_second=4.7e9)],
    )  # fmt: skip
    snap = NodeSnapshot(
        node="cpu-node", ts=1.7e9, agent_version="t", vendor="none", gpu_count=0,
        interval_seconds=10, ttl_seconds=30, cpu=CpuInfo(model_name="AMD EPYC", logical_cpus=2),
        benchmark=report,
    )  # fmt: skip
    state = AgentState(node="cpu-node", snapshot=snap)
    state.benchmark_runs["ok"] += 1
    state.last_benchmark_success_ts = 1.7e9
    return state


def test_cpu_mode_series() -> None:
    samples = _samples(_exposition(_cpu_state()))
    assert samples["gpuplan_agent_gpus"] == [({"node": "cpu-node"}, 0.0)]
    flops = {
        lab["dtype"]: (lab["gpu"], v) for lab, v in samples["gpuplan_agent_matmul_flops_per_second"]
    }
    assert flops["bf16"] == ("cpu", 1e11)
    assert "gpuplan_agent_matmul_peak_ratio" not in samples  # no catalog peak for a CPU
    (memcpy,) = samples["gpuplan_agent_copy_bandwidth_bytes_per_second"]
    assert memcpy[0]["kind"] == "host_memcpy"
    assert "gpuplan_agent_gpu_up" not in samples


def _exposition(state: AgentState) -> str:
    return generate_latest(registry_for(state)).decode()


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_promtool_accepts_the_exposition() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install -y prometheus)")
    for state in (_state(), _cpu_state(), AgentState(node="starting-node")):
        result = subprocess.run(
            [promtool, "check", "metrics"], input=_exposition(state), capture_output=True,
            text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.strip() == ""
        assert result.stderr.strip() == ""


def test_names_prefix_units_and_labels() -> None:
    samples = _samples(_exposition(_state()))
    assert all(name.startswith("gpuplan_agent_") for name in samples)
    assert not [n for n in samples if "DCGM" in n.upper()]
    for name in samples:
        assert re.fullmatch(r"[a-z_]+", name), name
    gpu_series = samples["gpuplan_agent_memory_total_bytes"]
    assert {tuple(sorted(labels)) for labels, _ in gpu_series} == {
        ("gpu", "model_name", "node", "uuid")
    }
    assert gpu_series[0][1] == 150_754_820_096  # bytes, not MiB
    power = {labels["gpu"]: v for labels, v in samples["gpuplan_agent_power_watts"]}
    assert power["0"] == pytest.approx(75.123)  # watts, not milliwatts
    assert "2" not in power  # the lost GPU has no readings...
    up = {labels["gpu"]: v for labels, v in samples["gpuplan_agent_gpu_up"]}
    assert up == {"0": 1.0, "1": 1.0, "2": 0.0}  # ...but says it is down
    (info,) = [s for s in samples["gpuplan_agent_gpu_info"] if s[0]["gpu"] == "0"]
    assert info[0]["catalog_id"] == "h200-sxm-141gb"
    assert info[1] == 1
    util = {labels["gpu"]: v for labels, v in samples["gpuplan_agent_gpu_utilization_ratio"]}
    assert util == {"0": 0.0}  # a ratio; unsupported on the MIG parent, absent on the lost GPU
    assert samples["gpuplan_agent_energy_joules_total"][0][1] == pytest.approx(123_456.789)
    clocks = {(lab["gpu"], lab["clock"]): v for lab, v in samples["gpuplan_agent_clock_hertz"]}
    assert clocks[("0", "sm")] == 345e6


def test_benchmark_mig_and_health_series() -> None:
    samples = _samples(_exposition(_state()))
    flops = {lab["dtype"]: v for lab, v in samples["gpuplan_agent_matmul_flops_per_second"]}
    assert flops["bf16"] == 760e12  # FLOP/s, not TFLOPS
    ratio = {lab["dtype"]: v for lab, v in samples["gpuplan_agent_matmul_peak_ratio"]}
    assert ratio["bf16"] == pytest.approx(760 / 989.5)
    copies = {(lab["kind"], lab["path"], lab["peer_gpu"]): v
              for lab, v in samples["gpuplan_agent_copy_bandwidth_bytes_per_second"]}  # fmt: skip
    assert copies[("d2d", "nvlink", "1")] == 360e9
    migs = samples["gpuplan_agent_mig_instance_info"]
    assert {lab["profile"] for lab, _ in migs} == {"3g.71gb", "2g.35gb", "1g.18gb"}
    in_use = {lab["profile"]: v for lab, v in samples["gpuplan_agent_mig_instance_in_use"]}
    assert in_use["3g.71gb"] == 1
    assert samples["gpuplan_agent_redis_connected"][0][1] == 0
    assert samples["gpuplan_agent_redis_publish_failures_total"][0][1] == 2
    errors = {lab["error"]: v for lab, v in samples["gpuplan_agent_collector_errors_total"]}
    assert errors == {"gpu_lost": 1, "not_supported": 6}
    skipped = {lab["reason"]: v for lab, v in samples["gpuplan_agent_benchmark_skipped_devices"]}
    assert skipped == {"mig": 1, "lost": 1}


def test_metrics_are_served_over_http() -> None:
    async def scrape() -> tuple[str, int, str]:
        server = await serve_metrics(registry_for(_state()), "127.0.0.1", 0)
        port = bound_port(server)

        def get(path: str) -> tuple[int, str, str]:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
                    return r.status, r.headers["Content-Type"], r.read().decode()
            except urllib.error.HTTPError as err:
                return err.code, "", ""

        try:
            status, kind, body = await asyncio.to_thread(get, "/metrics")
            assert status == 200
            missing, _, _ = await asyncio.to_thread(get, "/nope")
            health = await asyncio.to_thread(get, "/healthz")
            assert health[0] == 200
            return body, missing, kind
        finally:
            server.close()
            await server.wait_closed()

    body, missing, kind = asyncio.run(scrape())
    assert "gpuplan_agent_gpu_up" in body
    assert kind.startswith("text/plain")
    assert missing == 404
