"""The NVML collector against recorded NVML sessions (synthetic: no GPU here).

The replay raises pynvml's own error classes, so the collector's error handling
runs exactly as it would against the driver.
"""

import json
from collections import Counter
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpuplan.agent.telemetry import NoGpuSource, TelemetryError, open_source
from gpuplan.agent.telemetry.amd import AmdSource
from gpuplan.agent.telemetry.nvml import NvmlSource
from gpuplan.agent.telemetry.recording import RecordingNvml, ReplayNvml, to_json
from tests.agent_fixtures import recording, replay_source

GiB = 2**30


def test_full_telemetry_of_an_idle_nvlink_gpu() -> None:
    source, replay = replay_source("hgx-h200")
    sweep = source.collect("node-a")
    assert sweep.vendor == "nvidia"
    assert sweep.driver_version == "535.216.03"
    gpu = sweep.gpus[0]
    assert gpu.model_name == "NVIDIA H200"
    assert gpu.up
    assert gpu.memory_total_bytes == 150_754_820_096
    assert gpu.memory_used_bytes == 530 * 2**20
    assert gpu.memory_free_bytes == gpu.memory_total_bytes - gpu.memory_used_bytes
    assert gpu.utilization_ratio == 0.0
    assert gpu.power_watts == pytest.approx(75.123)  # mW -> W
    assert gpu.power_limit_watts == 700.0
    assert gpu.energy_joules == pytest.approx(123_456.789)  # mJ -> J
    assert gpu.temperature_celsius == 31.0  # via the fallback: no TemperatureV on 535
    assert gpu.sm_clock_hertz == 345e6  # MHz -> Hz
    assert gpu.sm_clock_max_hertz == 1980e6
    assert (gpu.pcie_generation, gpu.pcie_max_generation, gpu.pcie_width) == (1, 5, 16)
    assert gpu.pcie_tx_bytes_per_second == 1024 * 1024  # KB/s -> B/s
    assert gpu.nvlink_links_active == 18
    assert gpu.nvlink_version == 4  # NVML_NVLINK_VERSION_4_0 is 6
    assert gpu.nvlink_tx_bytes == 7_340_032 * 1024  # KiB counter -> bytes
    assert gpu.mig_enabled is False
    assert gpu.compute_processes == 0
    assert gpu.unsupported_fields == []
    assert sweep.nvlink_pairs == {(0, 1), (1, 0)}
    assert replay.missed == []  # the recording answers every call the collector makes


def test_not_supported_fields_are_skipped_listed_and_counted_once() -> None:
    source, replay = replay_source("hgx-h200")
    first = source.collect("node-a")
    mig_gpu = first.gpus[1]
    assert mig_gpu.utilization_ratio is None  # NVML: not supported on a MIG parent
    assert mig_gpu.memory_total_bytes == 150_754_820_096  # the rest still read
    assert {"utilization_ratio", "nvlink_tx_bytes", "nvlink_rx_bytes"} <= set(
        mig_gpu.unsupported_fields
    )
    counted = source.errors["not_supported"]
    assert counted >= 4
    calls_before = len(replay.missed)
    second = source.collect("node-a")
    assert source.errors["not_supported"] == counted  # cached, not retried or recounted
    assert second.gpus[1].unsupported_fields == mig_gpu.unsupported_fields
    assert len(replay.missed) == calls_before


def test_lost_gpu_is_down_and_never_queried_again() -> None:
    recorder = RecordingNvml(ReplayNvml(recording("hgx-h200"), pynvml))
    source = NvmlSource(recorder)
    sweep = source.collect("node-a")
    lost = sweep.gpus[2]
    assert not lost.up
    assert lost.uuid == "GPU-22222222-2222-4222-8222-222222222222"  # identity kept
    assert lost.model_name == "NVIDIA H200"
    assert lost.memory_total_bytes is None
    assert source.errors["gpu_lost"] == 1
    assert sweep.gpus[0].up
    assert sweep.gpus[1].up
    recorder.calls.clear()
    again = source.collect("node-a")
    assert not again.gpus[2].up
    assert again.gpus[2].uuid == lost.uuid
    assert recorder.calls  # the sweep ran...
    assert not [key for key in recorder.calls if "gpu2" in key or "(2)" in key]  # ...without it
    assert source.errors["gpu_lost"] == 1


def test_mig_instances_carry_what_a_slice_query_needs() -> None:
    sweep = replay_source("hgx-h200")[0].collect("node-a")
    migs = {m.profile: m for m in sweep.mig_instances}
    assert set(migs) == {"3g.71gb", "2g.35gb", "1g.18gb"}
    big = migs["3g.71gb"]
    assert big.node == "node-a"
    assert (big.gpu_index, big.gpu_uuid, big.gpu_model_name) == (
        1,
        "GPU-11111111-1111-4111-8111-111111111111",
        "NVIDIA H200",
    )
    assert big.mig_uuid.startswith("MIG-")
    assert (big.gpu_instance_id, big.placement_start, big.placement_size) == (1, 0, 4)
    assert big.memory_bytes == 70_912 * 2**20
    assert big.in_use  # pid 4242 runs on it
    assert not migs["2g.35gb"].in_use
    assert (migs["2g.35gb"].placement_start, migs["2g.35gb"].placement_size) == (4, 2)
    # The 1g instance's own process query is not supported: the parent's list decides.
    assert not migs["1g.18gb"].in_use


def test_mig_without_permission_falls_back_to_the_device_name() -> None:
    source, _ = replay_source("a100-pcie-mig")
    sweep = source.collect("node-b")
    (gpu,) = sweep.gpus
    assert gpu.nvlink_links_active is None  # a PCIe card: no NVLink
    assert "nvlink_links_active" in gpu.unsupported_fields
    (mig,) = sweep.mig_instances
    assert mig.profile == "3g.20gb"  # parsed from "NVIDIA A100-PCIE-40GB MIG 3g.20gb"
    assert mig.placement_start is None
    assert mig.placement_size is None
    assert "mig_placement" in gpu.unsupported_fields
    assert sweep.nvlink_pairs == frozenset()


def test_library_failure_raises_telemetry_error() -> None:
    calls: dict[str, dict[str, str] | None] = {
        "nvmlInit()": {"$error": "NVML_ERROR_DRIVER_NOT_LOADED"}
    }
    with pytest.raises(TelemetryError, match="did not initialise"):
        NvmlSource(ReplayNvml({"calls": calls}, pynvml))
    calls = {"nvmlInit()": None, "nvmlDeviceGetCount()": {"$error": "NVML_ERROR_UNKNOWN"}}
    source = NvmlSource(ReplayNvml({"calls": calls}, pynvml))
    with pytest.raises(TelemetryError, match="count devices"):
        source.collect("n")
    assert source.errors["unknown"] == 1


def test_recording_a_session_reproduces_it() -> None:
    """RecordingNvml over a replay writes the same answers back: the capture format
    is the replay format."""
    original = recording("hgx-h200")["calls"]
    recorder = RecordingNvml(ReplayNvml({"calls": original}, pynvml))
    NvmlSource(recorder).collect("node-a")
    assert recorder.calls
    for key, value in recorder.calls.items():
        assert original[key] == value, key
    replayed = NvmlSource(ReplayNvml(recorder.recording("round trip"), pynvml)).collect("node-a")
    assert replayed == NvmlSource(ReplayNvml({"calls": original}, pynvml)).collect("node-a")


def test_ctypes_structs_serialise_without_pointers() -> None:
    info = pynvml.c_nvmlGpuInstanceInfo_t()
    info.id, info.profileId = 3, 9
    info.placement.start, info.placement.size = 4, 4
    assert to_json(info) == {"id": 3, "profileId": 9, "placement": {"start": 4, "size": 4}}
    memory = pynvml.c_nvmlMemory_t()
    memory.total = 80 * GiB
    assert json.loads(json.dumps(to_json(memory)))["total"] == 80 * GiB


def test_no_driver_means_cpu_mode() -> None:
    # This machine has nvidia-ml-py but no libnvidia-ml: auto falls back to none.
    source = open_source("auto")
    assert isinstance(source, NoGpuSource)
    assert source.collect("n").gpus == []
    with pytest.raises(TelemetryError):
        open_source("nvidia")


class _AmdError(Exception):
    pass


def _amdsmi(answers: dict[str, Any]) -> Any:
    """An amdsmi module stand-in answering from recorded values (synthetic, see docs)."""

    def call(name: str) -> Any:
        def answer(*args: Any) -> Any:
            value = answers[name]
            if isinstance(value, Exception):
                raise value
            return value(*args) if callable(value) else value

        return answer

    enums = SimpleNamespace(
        AmdSmiInitFlags=SimpleNamespace(INIT_AMD_GPUS=2),
        AmdSmiTemperatureType=SimpleNamespace(EDGE=0),
        AmdSmiTemperatureMetric=SimpleNamespace(CURRENT=0),
        AmdSmiClkType=SimpleNamespace(GFX=0),
        AmdSmiException=_AmdError,
    )
    for name in answers:
        setattr(enums, name, call(name))
    return enums


def test_amd_backend_normalises_units() -> None:
    smi = _amdsmi(
        {
            "amdsmi_init": None,
            "amdsmi_shut_down": None,
            "amdsmi_get_processor_handles": ["h0"],
            "amdsmi_get_gpu_device_uuid": "a4ff74a1-0000-1000-80ab-c1d2e3f40506",
            "amdsmi_get_gpu_asic_info": {"market_name": "AMD Instinct MI300X"},
            "amdsmi_get_gpu_driver_info": {"driver_version": "6.8.5"},
            "amdsmi_get_gpu_activity": {"gfx_activity": 37, "umc_activity": 12, "mm_activity": 0},
            "amdsmi_get_gpu_vram_usage": {"vram_total": 196_592, "vram_used": 1_024},
            "amdsmi_get_power_info": {"current_socket_power": 143, "power_limit": 750},
            "amdsmi_get_temp_metric": _AmdError("not supported"),
            "amdsmi_get_clock_info": {"clk": 2100, "min_clk": 500, "max_clk": 2100},
        }
    )
    source = AmdSource(smi)
    (gpu,) = source.collect("node-c").gpus
    assert gpu.model_name == "AMD Instinct MI300X"
    assert gpu.utilization_ratio == pytest.approx(0.37)
    assert gpu.memory_total_bytes == 196_592 * 2**20
    assert gpu.memory_free_bytes == (196_592 - 1_024) * 2**20
    assert gpu.power_watts == 143.0
    assert gpu.sm_clock_hertz == 2100e6
    assert gpu.temperature_celsius is None
    assert gpu.unsupported_fields == ["temperature_celsius"]
    assert source.errors == Counter({"not_supported": 1})


def test_recorder_without_a_driver_says_so() -> None:
    import subprocess
    import sys
    from pathlib import Path

    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "service"), "PATH": "/usr/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "gpuplan.agent.telemetry.record"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert "cannot record: NVML did not initialise" in done.stderr
    assert done.stdout == ""


def test_a_real_h200_recording_replays_through_the_collector() -> None:
    """tests/fixtures/nvml/h200-vm.json was captured from a real H200 (driver 580): the
    collector reads it as the driver answered, NVLink (absent in that VM) unsupported."""
    source, replay = replay_source("h200-vm")
    sweep = source.collect("vm")
    assert sweep.driver_version == "580.159.04"
    [gpu] = sweep.gpus
    assert (gpu.model_name, gpu.up, gpu.mig_enabled) == ("NVIDIA H200", True, False)
    assert gpu.memory_total_bytes == 150_754_820_096  # 140.4 GiB: NVML's total, not 141 GB
    assert gpu.memory_used_bytes == 644_939_776
    assert gpu.power_limit_watts == 700.0
    assert gpu.temperature_celsius == 31.0  # TemperatureV answers on 580
    assert (gpu.sm_clock_hertz, gpu.sm_clock_max_hertz) == (345e6, 1980e6)
    assert (gpu.pcie_generation, gpu.pcie_width) == (5, 16)
    assert gpu.compute_processes == 0
    assert sweep.nvlink_pairs == set()
    # The capture predates GPM collection: the support query is the one call it lacks,
    # and it answers FUNCTION_NOT_FOUND, as a driver without GPM would. The activities
    # are then listed unsupported and counted, never published as 0.
    assert replay.missed == ["nvmlGpmQueryDeviceSupport(gpu0)"]
    assert gpu.unsupported_fields == [
        "dram_activity_ratio", "nvlink_links_active", "nvlink_version",
        "sm_activity_ratio", "tensor_activity_ratio",
    ]  # fmt: skip
    assert (gpu.sm_activity_ratio, gpu.tensor_activity_ratio, gpu.dram_activity_ratio) == (
        None, None, None,
    )  # fmt: skip
    assert source.errors["gpm_function_not_found"] == 1
