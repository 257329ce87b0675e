"""SM, tensor and DRAM activity through NVML GPM, per GPU and per MIG GPU instance.

Against recorded NVML sessions (tests/fixtures/nvml/: h100-mig-gpm.json, constructed
for a Hopper node with MIG; a100-pcie-mig.json, Ampere, no GPM; h200-vm.json, captured
before GPM collection), and against a stand-in module built on pynvml's own ctypes
structs, so the request the collector builds is the one the driver would get.
"""

import asyncio
import ctypes
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pynvml
import pytest
import redis
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis as AsyncRedis

from gpuplan.agent.exporter import registry_for
from gpuplan.agent.state import AgentState
from gpuplan.agent.telemetry.gpm import GpmSampler, Source
from gpuplan.agent.telemetry.nvml import NvmlSource
from gpuplan.agent.telemetry.recording import RecordingNvml, ReplayNvml
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.fleet import CpuInfo, NodeSnapshot, enrich
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.store import FleetStore
from tests.agent_fixtures import NVML_FIXTURES, no_wait, recording, replay_source
from tests.helpers import fleet_client, publish_snapshots

ACTIVITY = ("sm_activity_ratio", "tensor_activity_ratio", "dram_activity_ratio")
MIG_LABELS = {"node", "gpu", "uuid", "model_name", "mig_uuid", "profile", "gpu_instance_id",
              "compute_instance_id"}  # fmt: skip


def _source(calls: dict[str, Any]) -> tuple[NvmlSource, ReplayNvml, list[float]]:
    slept: list[float] = []
    replay = ReplayNvml({"calls": calls}, pynvml)
    return NvmlSource(replay, sleep=slept.append), replay, slept


def _activity(item: Any) -> tuple[float | None, ...]:
    return tuple(getattr(item, field) for field in ACTIVITY)


# -- the collector -------------------------------------------------------------------------


def test_activity_per_gpu_and_gpu_instance_from_a_hopper_recording() -> None:
    source, replay, slept = _source(recording("h100-mig-gpm")["calls"])
    sweep = source.collect("node-h")
    gpu0 = sweep.gpus[0]
    assert _activity(gpu0) == (0.4035, 0.251, 0.285)  # GPM answers percent: / 100
    assert not set(ACTIVITY) & set(gpu0.unsupported_fields)
    by_ci = {(m.gpu_instance_id, m.compute_instance_id): m for m in sweep.mig_instances}
    assert set(by_ci) == {(1, 0), (1, 1), (2, 0)}
    # GPM measures the GPU instance: both compute instances of GI 1 carry its value.
    assert _activity(by_ci[1, 0]) == _activity(by_ci[1, 1]) == (0.715, 0.4825, 0.35)
    assert _activity(by_ci[2, 0]) == (0.125, 0.0375, 0.22)
    assert slept == [0.2]  # one settle (> 100 ms, nvml.h) between the first two samples
    assert replay.missed == []
    assert not [k for k in source.errors if k.startswith("gpm")]


def test_the_values_are_gpm_not_utilization_gpu() -> None:
    """One single-block kernel: utilization.gpu says 100%, GPM says 1 of 132 SMs."""
    gpu1 = _source(recording("h100-mig-gpm")["calls"])[0].collect("node-h").gpus[1]
    assert gpu1.utilization_ratio == 1.0
    assert gpu1.sm_activity_ratio == pytest.approx(0.0076)
    assert gpu1.tensor_activity_ratio == 0.0


def test_a_later_sweep_reads_the_interval_since_the_previous_one() -> None:
    source, _, slept = _source(recording("h100-mig-gpm")["calls"])
    source.collect("node-h")
    second = source.collect("node-h")
    assert slept == [0.2]  # no settle once every source has a sample from the last sweep
    assert _activity(second.gpus[0]) == pytest.approx((0.4433, 0.2805, 0.3013))
    gi2 = next(m for m in second.mig_instances if m.gpu_instance_id == 2)
    assert _activity(gi2) == (0.09, 0.025, 0.185)


def test_a_gpu_without_gpm_lists_the_fields_and_counts_once() -> None:
    recorder = RecordingNvml(ReplayNvml(recording("a100-pcie-mig"), pynvml))
    source = NvmlSource(recorder, sleep=no_wait)
    for _ in range(3):
        sweep = source.collect("node-b")
    (gpu,) = sweep.gpus
    assert _activity(gpu) == (None, None, None)
    assert set(ACTIVITY) <= set(gpu.unsupported_fields)
    assert _activity(sweep.mig_instances[0]) == (None, None, None)
    assert source.errors["gpm_not_supported"] == 1  # asked once, never again
    gpm_calls = [k for k in recorder.calls if k.startswith("nvmlGpm")]
    assert gpm_calls == ["nvmlGpmQueryDeviceSupport(gpu0)"]


def _metrics_key(source: str, a: int, b: int) -> str:
    return f"nvmlGpmMetricsGet({source}/gpm{a}, {source}/gpm{b}, [2,5,10])"


def test_failed_calls_and_values_are_counted_and_left_out() -> None:
    calls = dict(recording("h100-mig-gpm")["calls"])
    # The MIG-enabled parent refuses a whole-GPU sample: its fields are unsupported.
    calls["nvmlGpmSampleGet(gpu0, gpu0/gpm1)"] = {"$error": "NVML_ERROR_NOT_SUPPORTED"}
    # GI 2 refuses DRAM bandwidth in every answer.
    for a, b in ((1, 2), (2, 3)):
        answer = [dict(m) for m in calls[_metrics_key("gpu0/gi2", a, b)]]
        answer[2] = {"metricId": 10, "nvmlReturn": 3, "value": 0.0}
        calls[_metrics_key("gpu0/gi2", a, b)] = answer
    # gpu1: the first computation fails outright, the second answers nonsense and rounding.
    calls[_metrics_key("gpu1", 1, 2)] = {"$error": "NVML_ERROR_UNKNOWN"}
    odd = [{"metricId": 2, "nvmlReturn": 0, "value": 250.0},
           {"metricId": 5, "nvmlReturn": 0, "value": float("nan")},
           {"metricId": 10, "nvmlReturn": 0, "value": 100.004}]  # fmt: skip
    calls[_metrics_key("gpu1", 2, 3)] = odd
    source, _, _ = _source(calls)
    first, second = source.collect("n"), source.collect("n")
    for sweep in (first, second):
        gpu0 = sweep.gpus[0]
        assert _activity(gpu0) == (None, None, None)
        assert set(ACTIVITY) <= set(gpu0.unsupported_fields)
        gi2 = next(m for m in sweep.mig_instances if m.gpu_instance_id == 2)
        assert gi2.dram_activity_ratio is None
        assert gi2.sm_activity_ratio is not None  # the other metrics of the answer stand
        assert {m.sm_activity_ratio for m in sweep.mig_instances if m.gpu_instance_id == 1} != {
            None
        }
    assert _activity(first.gpus[1]) == (None, None, None)
    assert not set(ACTIVITY) & set(first.gpus[1].unsupported_fields)  # a failure, not a lack
    assert _activity(second.gpus[1]) == (None, None, 1.0)  # 100.004%: rounding, clamped
    assert source.errors["gpm_not_supported"] == 2  # parent sample, GI 2 DRAM: once each
    assert source.errors["gpm_unknown"] == 1
    assert source.errors["gpm_invalid_value"] == 2  # 250% and NaN


def test_a_gpu_lost_while_sampled_is_down_without_its_instances() -> None:
    calls = dict(recording("h100-mig-gpm")["calls"])
    calls["nvmlGpmMigSampleGet(gpu0, 2, gpu0/gi2/gpm2)"] = {"$error": "NVML_ERROR_GPU_IS_LOST"}
    recorder = RecordingNvml(ReplayNvml({"calls": calls}, pynvml))
    source = NvmlSource(recorder, sleep=no_wait)
    sweep = source.collect("n")
    assert [g.up for g in sweep.gpus] == [False, True]
    assert sweep.gpus[0].uuid == "GPU-44444444-4444-4444-8444-444444444444"
    assert sweep.mig_instances == []
    assert source.errors["gpu_lost"] == 1
    assert sweep.gpus[1].sm_activity_ratio == pytest.approx(0.0076)
    recorder.calls.clear()
    again = source.collect("n")
    assert [g.up for g in again.gpus] == [False, True]
    assert recorder.calls  # the sweep ran, without asking the lost GPU anything
    assert not [key for key in recorder.calls if "gpu0" in key or "(0)" in key]
    assert again.gpus[1].sm_activity_ratio == pytest.approx(0.0076)


def test_a_reconfigured_gpu_instance_is_sampled_afresh() -> None:
    """NVML reuses GPU-instance ids: an instance with new MIG devices is a new source,
    never diffed against a sample of the one it replaced."""
    calls = dict(recording("h100-mig-gpm")["calls"])
    source, _, slept = _source(calls)
    source.collect("n")
    # GPU instance 2 destroyed and made again: same id, a new MIG device (the replay
    # answers from this very dict).
    calls["nvmlDeviceGetUUID(gpu0/mig2)"] = "MIG-cccccccc-0000-5000-8000-0000000000ff"
    sweep = source.collect("n")
    assert slept == [0.2, 0.2]  # the new instance was primed, not paired with the old one
    gi2 = next(m for m in sweep.mig_instances if m.gpu_instance_id == 2)
    assert gi2.mig_uuid.endswith("ff")
    assert gi2.sm_activity_ratio is not None


def test_recording_gpm_reproduces_it() -> None:
    """RecordingNvml writes GPM calls in the replay format: named samples, metrics."""
    original = recording("h100-mig-gpm")["calls"]
    recorder = RecordingNvml(ReplayNvml({"calls": original}, pynvml))
    source = NvmlSource(recorder, sleep=no_wait)
    sweeps = [source.collect("n"), source.collect("n")]
    source.close()
    gpm = {k: v for k, v in recorder.calls.items() if k.startswith("nvmlGpm")}
    assert _metrics_key("gpu0/gi1", 2, 3) in gpm
    assert "nvmlGpmMigSampleGet(gpu0, 1, gpu0/gi1/gpm3)" in gpm
    for key, value in gpm.items():
        assert original[key] == value, key
    replayed = NvmlSource(ReplayNvml(recorder.recording("again"), pynvml), sleep=no_wait)
    assert [replayed.collect("n"), replayed.collect("n")] == sweeps


class _Driver:
    """GPM functions over pynvml's real ctypes types, answering like the driver: what
    the collector builds must be a valid ``c_nvmlGpmMetricsGet_t``."""

    def __init__(self) -> None:
        self.buffers: list[Any] = []
        self.freed: list[int] = []
        self.samples: dict[int, int] = {}  # address -> sample count of its filling
        self.requests: list[tuple[int, int, int, int, list[int]]] = []

    def module(self) -> Any:
        names = [n for n in dir(pynvml) if n.startswith(("NVML_", "NVMLError"))]
        module = SimpleNamespace(**{n: getattr(pynvml, n) for n in names})
        module.c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
        module.nvmlGpmSampleAlloc = self.alloc
        module.nvmlGpmSampleFree = lambda s: self.freed.append(_address(s))
        module.nvmlGpmSampleGet = lambda device, s: self.fill(s)
        module.nvmlGpmMigSampleGet = lambda device, gi, s: self.fill(s)
        module.nvmlGpmMetricsGet = self.metrics
        module.nvmlGpmQueryDeviceSupport = lambda device: SimpleNamespace(isSupportedDevice=1)
        return module

    def alloc(self) -> Any:
        buffer = ctypes.create_string_buffer(16)
        self.buffers.append(buffer)
        return ctypes.cast(buffer, pynvml.c_nvmlGpmSample_t)

    def fill(self, sample: Any) -> Any:
        self.samples[_address(sample)] = len(self.samples) + 1
        return sample

    def metrics(self, request: Any) -> Any:
        assert isinstance(request, pynvml.c_nvmlGpmMetricsGet_t)
        ids = [request.metrics[i].metricId for i in range(request.numMetrics)]
        self.requests.append((request.version, request.numMetrics, _address(request.sample1),
                              _address(request.sample2), ids))  # fmt: skip
        for i, metric_id in enumerate(ids):
            request.metrics[i].nvmlReturn = pynvml.NVML_SUCCESS
            request.metrics[i].value = float(metric_id)  # 2%, 5%, 10%
        return request


def _address(sample: Any) -> int:
    return int(ctypes.cast(sample, ctypes.c_void_p).value or 0)


@pytest.mark.parametrize("recorded", [False, True], ids=["direct", "through-the-recorder"])
def test_the_request_is_pynvml_own_struct(recorded: bool) -> None:
    driver = _Driver()
    nvml = driver.module()
    if recorded:
        nvml = RecordingNvml(nvml)
    sampler = GpmSampler(nvml, Counter(), sleep=no_wait)
    gpu = Source("GPU-x")
    device = SimpleNamespace()  # a device handle the fake driver does not look at
    first = sampler.measure([(gpu, device)])
    second = sampler.measure([(gpu, device)])
    assert first.values[gpu] == second.values[gpu] == {
        "sm_activity_ratio": 0.02, "tensor_activity_ratio": 0.05, "dram_activity_ratio": 0.1,
    }  # fmt: skip
    (v1, n1, a1, b1, ids1), (v2, n2, a2, b2, ids2) = driver.requests
    assert (v1, n1, ids1) == (pynvml.NVML_GPM_METRICS_GET_VERSION, 3, [2, 5, 10]) == (v2, n2, ids2)
    assert driver.samples[a1] < driver.samples[b1]  # earlier sample first
    assert a2 == b1  # the second sweep starts from the first's newer sample...
    assert a1 in driver.freed  # ...and the older one is freed
    sampler.close()
    assert set(driver.freed) >= {a1, a2, b2}


# -- the exposition --------------------------------------------------------------------------


def _snapshot(fixture: str, node: str) -> tuple[NodeSnapshot, Counter[str]]:
    source, _ = replay_source(fixture)
    sweep = source.collect(node)
    snap = NodeSnapshot(
        node=node, ts=time.time(), agent_version="test", vendor="nvidia", gpu_count=len(sweep.gpus),
        driver_version=sweep.driver_version, interval_seconds=10, ttl_seconds=30,
        cpu=CpuInfo(model_name="Intel Xeon Platinum 8480+", logical_cpus=224),
        gpus=sweep.gpus, mig_instances=sweep.mig_instances,
    )  # fmt: skip
    return enrich(snap, builtin_catalog()), source.errors


def _exposition(fixture: str, node: str) -> str:
    snap, errors = _snapshot(fixture, node)
    state = AgentState(node=node, backend="nvidia", snapshot=snap)
    state.collector_errors = errors.copy()
    return generate_latest(registry_for(state)).decode()


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((sample.labels, sample.value))
    return out


def test_gpm_series_render_with_their_labels() -> None:
    text = _exposition("h100-mig-gpm", "node-h")
    samples = _samples(text)
    sm = {lab["gpu"]: v for lab, v in samples["gpuplan_agent_gpu_sm_activity_ratio"]}
    util = {lab["gpu"]: v for lab, v in samples["gpuplan_agent_gpu_utilization_ratio"]}
    assert sm == {"0": 0.4035, "1": 0.0076}
    assert util == {"1": 1.0}  # the MIG-enabled GPU has no utilization.gpu at all
    for name in ("sm", "tensor", "dram"):
        series = samples[f"gpuplan_agent_mig_instance_{name}_activity_ratio"]
        assert len(series) == 3
        assert all(set(labels) == MIG_LABELS for labels, _ in series)
    tensor = {(lab["gpu_instance_id"], lab["compute_instance_id"], lab["profile"]): v
              for lab, v in samples["gpuplan_agent_mig_instance_tensor_activity_ratio"]}  # fmt: skip
    assert tensor == {("1", "0", "4g.40gb"): 0.4825, ("1", "1", "4g.40gb"): 0.4825,
                      ("2", "0", "3g.40gb"): 0.0375}  # fmt: skip
    assert "utilization.gpu" in text.split("gpuplan_agent_gpu_sm_activity_ratio ")[1].split("\n")[0]


def test_without_gpm_no_series_and_a_counted_reason() -> None:
    samples = _samples(_exposition("a100-pcie-mig", "node-b"))
    assert not [n for n in samples if "activity" in n]  # never a 0 standing in for "no GPM"
    errors = {lab["error"]: v for lab, v in samples["gpuplan_agent_collector_errors_total"]}
    assert errors["gpm_not_supported"] == 1
    captured = _samples(_exposition("h200-vm", "vm"))
    assert not [n for n in captured if "activity" in n]
    errors = {lab["error"]: v for lab, v in captured["gpuplan_agent_collector_errors_total"]}
    assert errors["gpm_function_not_found"] == 1


def test_promtool_accepts_the_gpm_exposition() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install -y prometheus)")
    for fixture in ("h100-mig-gpm", "a100-pcie-mig", "hgx-h200"):
        result = subprocess.run(
            [promtool, "check", "metrics"], input=_exposition(fixture, "node-h"),
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        assert (result.stdout + result.stderr).strip() == ""


# -- the fleet: Redis, the API, the CLI --------------------------------------------------------


def test_activity_reaches_the_fleet_api(redis_url: str, key_prefix: str) -> None:
    snap, _ = _snapshot("h100-mig-gpm", "node-h")
    publish_snapshots(redis_url, key_prefix, snap)
    with fleet_client(redis_url, key_prefix) as client:
        node = client.get("/v1/fleet/nodes/node-h").json()
    assert [g["sm_activity_ratio"] for g in node["gpus"]] == [0.4035, 0.0076]
    assert [g["utilization_ratio"] for g in node["gpus"]] == [None, 1.0]
    got = {(m["gpu_instance_id"], m["compute_instance_id"]): m for m in node["mig_instances"]}
    assert {k: got[k]["dram_activity_ratio"] for k in got} == {
        (1, 0): 0.35, (1, 1): 0.35, (2, 0): 0.22,
    }  # fmt: skip


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_ratio_beyond_one_in_redis_is_refused_by_name(redis_url: str, key_prefix: str) -> None:
    """A foreign writer's 1.5 never reaches an answer: the node is skipped and the log
    names the field (the reader's rule for hashes schema v1 does not allow)."""
    snap, _ = _snapshot("h100-mig-gpm", "node-h")
    publish_snapshots(redis_url, key_prefix, snap)
    r = redis.Redis.from_url(redis_url)
    with fleet_client(redis_url, key_prefix) as client:
        assert client.get("/v1/fleet/nodes").json()["count"] == 1  # as published
        r.hset(Keys(key_prefix).mig("node-h", snap.mig_instances[0].mig_uuid),
               "sm_activity_ratio", "1.5")  # fmt: skip
        r.close()
        assert client.get("/v1/fleet/nodes").json()["count"] == 0

    async def read() -> list[NodeSnapshot]:
        client = AsyncRedis.from_url(redis_url)
        try:
            return await FleetStore(client, Keys(key_prefix)).nodes()
        finally:
            await client.aclose()

    records = _Records()
    logger = logging.getLogger("gpuplan.fleet")
    # A handler of its own, enabled: an app's logging config may have stopped propagation
    # or disabled the existing loggers.
    disabled, logger.disabled = logger.disabled, False
    logger.addHandler(records)
    try:
        assert asyncio.run(read()) == []
    finally:
        logger.removeHandler(records)
        logger.disabled = disabled
    (message,) = records.messages
    assert message.startswith("skipping node node-h")
    assert "$.sm_activity_ratio" in message


def test_the_fields_are_in_the_openapi_document() -> None:
    """api/openapi.yaml (test_openapi.py keeps it what the code generates) bounds them."""
    document = yaml.safe_load((Path(__file__).parents[1] / "api" / "openapi.yaml").read_text())
    schemas = document["components"]["schemas"]
    for struct in ("GpuTelemetry", "MigInstance"):
        props = schemas[struct]["properties"]
        for field in ACTIVITY:
            assert props[field]["anyOf"][0] == {"type": "number", "minimum": 0, "maximum": 1}
            assert "GPM" in schemas[struct]["properties"][field]["description"]


@pytest.mark.slow
def test_the_cli_prints_the_activity() -> None:
    """``gpuplan agent --once`` over the recording: the CLI's JSON carries the fields."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "service")}
    done = subprocess.run(
        [sys.executable, "-m", "gpuplan", "agent", "--once", "--no-benchmark", "--node", "cli",
         "--nvml-recording", str(NVML_FIXTURES / "h100-mig-gpm.json")],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert [g["sm_activity_ratio"] for g in printed["gpus"]] == [0.4035, 0.0076]
    assert {m["tensor_activity_ratio"] for m in printed["mig_instances"]} == {0.4825, 0.0375}
    msgspec.convert(printed, NodeSnapshot)  # and it is a valid snapshot
