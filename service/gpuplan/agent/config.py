"""The agent's settings: one validated Struct, filled from options or ``GPUPLAN_AGENT_*``."""

import os
import socket
from typing import Annotated, Literal

import msgspec

from gpuplan.core.record import Record
from gpuplan.fleet.schema import DEFAULT_PREFIX, NODE_NAME

Seconds = Annotated[float, msgspec.Meta(gt=0, le=7 * 86_400)]
Bytes = Annotated[int, msgspec.Meta(ge=1, le=64 * 2**30)]

# TTL of a node's keys in publish intervals: one lost publish must not make a node
# vanish, three in a row should.
TTL_INTERVALS = 3


class AgentConfig(Record, kw_only=True):
    """Validated settings of one agent process."""

    node: Annotated[str, msgspec.Meta(pattern=NODE_NAME.pattern)]
    """The node's name [default: ``$NODE_NAME`` (Kubernetes downward API), else the hostname]."""

    redis_url: Annotated[str, msgspec.Meta(pattern=r"^(redis|rediss|unix)://")] | None = None
    """Fleet store (``redis://``, ``rediss://``, ``unix://``); unset: ``/metrics`` only."""

    key_prefix: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] = DEFAULT_PREFIX
    """Prefix of every Redis key; the API's ``GPUPLAN_FLEET_KEY_PREFIX`` must match."""

    redis_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=30)] = 2.0
    """Connect and command timeout for Redis."""

    metrics_host: str = "0.0.0.0"  # noqa: S104 - a DaemonSet's exporter listens on its pod IP
    """Address of ``/metrics``."""

    metrics_port: Annotated[int, msgspec.Meta(ge=0, le=65535)] = 9400
    """Port of ``/metrics`` (0: any free port)."""

    interval_seconds: Seconds = 10.0
    """Seconds between telemetry sweeps; Redis keys live 3 intervals."""

    benchmark_interval_seconds: Seconds = 6 * 3600.0
    """Seconds between benchmark runs."""

    benchmark_timeout_seconds: Seconds = 600.0
    """Seconds before a benchmark run is killed."""

    benchmark: bool = True
    """Run benchmarks at all."""

    backend: Literal["auto", "nvidia", "amd", "none"] = "auto"
    """Telemetry library; ``none``: CPU mode."""

    gpu_matmul_size: Annotated[int, msgspec.Meta(ge=16, le=65_536)] = 8192
    """m = n = k of the GPU matmul."""

    cpu_matmul_size: Annotated[int, msgspec.Meta(ge=16, le=16_384)] = 256
    """m = n = k of the CPU matmul."""

    matmul_warmup: Annotated[int, msgspec.Meta(ge=0, le=10_000)] = 10
    """Untimed matmul calls first."""

    matmul_iterations: Annotated[int, msgspec.Meta(ge=50, le=100_000)] = 50
    """Timed matmul calls (at least 50); the median is reported."""

    gpu_copy_bytes: Bytes = 512 * 2**20
    """Bytes per host-device and device-device copy."""

    cpu_copy_bytes: Bytes = 32 * 2**20
    """Bytes per host memory copy (CPU mode)."""

    cpu_threads: Annotated[int, msgspec.Meta(ge=0, le=4096)] = 0
    """Threads of CPU benchmarks (0: every CPU allowed)."""

    once: bool = False
    """Collect, benchmark and publish once, print the snapshot, exit 0 on success and 1
    on failure."""

    @property
    def ttl_seconds(self) -> float:
        return TTL_INTERVALS * self.interval_seconds


def default_node() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname().split(".")[0]
