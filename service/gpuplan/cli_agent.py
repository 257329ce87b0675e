"""``gpuplan agent``: the GPU agent sidecar's command line.

Kept apart from :mod:`gpuplan.cli` and importing nothing heavy at module level, so
``gpuplan --help`` stays fast and the API's import rules hold. Every option can
also be set as ``GPUPLAN_AGENT_<OPTION>`` (``GPUPLAN_AGENT_REDIS_URL``).
"""

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

ENV = "GPUPLAN_AGENT_"


def _env(name: str) -> str:
    return ENV + name.upper()


@click.command(context_settings={"max_content_width": 100, "show_default": True})
@click.option(
    "--node",
    envvar=_env("node"),
    show_envvar=True,
    help="Node name [default: $NODE_NAME, else the hostname].",
)
@click.option(
    "--redis-url",
    envvar=_env("redis_url"),
    show_envvar=True,
    help="Fleet store (redis://, rediss://, unix://); unset: /metrics only.",
)
@click.option(
    "--key-prefix",
    envvar=_env("key_prefix"),
    show_envvar=True,
    default="gpuplan:v1:",
    help="Prefix of every Redis key.",
)
@click.option(
    "--metrics-host",
    envvar=_env("metrics_host"),
    show_envvar=True,
    default="0.0.0.0",  # noqa: S104 - a DaemonSet exporter listens on its pod IP
    help="Address of /metrics.",
)
@click.option(
    "--metrics-port",
    envvar=_env("metrics_port"),
    show_envvar=True,
    type=int,
    default=9400,
    help="Port of /metrics (0: any free port).",
)
@click.option(
    "--interval",
    envvar=_env("interval"),
    show_envvar=True,
    type=float,
    default=10.0,
    help="Seconds between telemetry sweeps; Redis keys live 3 intervals.",
)
@click.option(
    "--benchmark-interval",
    envvar=_env("benchmark_interval"),
    show_envvar=True,
    type=float,
    default=6 * 3600.0,
    help="Seconds between benchmark runs.",
)
@click.option(
    "--benchmark-timeout",
    envvar=_env("benchmark_timeout"),
    show_envvar=True,
    type=float,
    default=600.0,
    help="Seconds before a benchmark run is killed.",
)
@click.option(
    "--benchmark/--no-benchmark",
    envvar=_env("benchmark"),
    show_envvar=True,
    default=True,
    help="Run benchmarks at all.",
)
@click.option(
    "--backend",
    envvar=_env("backend"),
    show_envvar=True,
    type=click.Choice(["auto", "nvidia", "amd", "none"]),
    default="auto",
    help="Telemetry library; none: CPU mode.",
)
@click.option(
    "--gpu-matmul-size",
    envvar=_env("gpu_matmul_size"),
    show_envvar=True,
    type=int,
    default=8192,
    help="m = n = k of the GPU matmul.",
)
@click.option(
    "--cpu-matmul-size",
    envvar=_env("cpu_matmul_size"),
    show_envvar=True,
    type=int,
    default=256,
    help="m = n = k of the CPU matmul.",
)
@click.option(
    "--matmul-warmup",
    envvar=_env("matmul_warmup"),
    show_envvar=True,
    type=int,
    default=10,
    help="Untimed matmul calls first.",
)
@click.option(
    "--matmul-iterations",
    envvar=_env("matmul_iterations"),
    show_envvar=True,
    type=int,
    default=50,
    help="Timed matmul calls (>= 50); the median is reported.",
)
@click.option(
    "--gpu-copy-bytes",
    envvar=_env("gpu_copy_bytes"),
    show_envvar=True,
    type=int,
    default=512 * 2**20,
    help="Bytes per host-device and device-device copy.",
)
@click.option(
    "--cpu-copy-bytes",
    envvar=_env("cpu_copy_bytes"),
    show_envvar=True,
    type=int,
    default=32 * 2**20,
    help="Bytes per host memory copy (CPU mode).",
)
@click.option(
    "--cpu-threads",
    envvar=_env("cpu_threads"),
    show_envvar=True,
    type=int,
    default=0,
    help="Threads of CPU benchmarks (0: every CPU allowed).",
)
@click.option(
    "--once",
    envvar=_env("once"),
    show_envvar=True,
    is_flag=True,
    help="Collect, benchmark and publish once, print the snapshot, exit 0 on success and 1 on failure.",
)
@click.option(
    "--nvml-recording",
    envvar=_env("nvml_recording"),
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    hidden=True,
    help="Replay a recorded NVML session instead of the driver (demos, tests).",
)
@click.option(
    "--log-level",
    envvar=_env("log_level"),
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    help="Log threshold (logs go to stderr).",
)
def agent(nvml_recording: Path | None, log_level: str, **options: Any) -> None:
    """Run the GPU agent: telemetry and benchmarks to Prometheus and Redis.

    Telemetry comes from NVML (nvidia-ml-py) or amd-smi; without a GPU it runs in
    CPU mode and benchmarks the CPU. Needs the `agent` extra (and `torch` for
    benchmarks): pip install 'gpuplan[agent,torch]'.
    """
    import msgspec

    from gpuplan.agent.config import AgentConfig, default_node

    logging.basicConfig(
        stream=sys.stderr,
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    values = {
        "node": options["node"] or default_node(),
        "redis_url": options["redis_url"] or None,
        "key_prefix": options["key_prefix"],
        "metrics_host": options["metrics_host"],
        "metrics_port": options["metrics_port"],
        "interval_seconds": options["interval"],
        "benchmark_interval_seconds": options["benchmark_interval"],
        "benchmark_timeout_seconds": options["benchmark_timeout"],
        "benchmark": options["benchmark"],
        "backend": options["backend"],
        "gpu_matmul_size": options["gpu_matmul_size"],
        "cpu_matmul_size": options["cpu_matmul_size"],
        "matmul_warmup": options["matmul_warmup"],
        "matmul_iterations": options["matmul_iterations"],
        "gpu_copy_bytes": options["gpu_copy_bytes"],
        "cpu_copy_bytes": options["cpu_copy_bytes"],
        "cpu_threads": options["cpu_threads"],
        "once": options["once"],
    }
    try:
        config = msgspec.convert(values, AgentConfig)
    except msgspec.ValidationError as exc:
        raise click.UsageError(f"invalid agent option: {exc}") from None
    sys.exit(_run(config, nvml_recording))


def _run(config: Any, nvml_recording: Path | None) -> int:
    import msgspec

    from gpuplan.agent.loop import Agent
    from gpuplan.agent.telemetry import TelemetryError, open_source
    from gpuplan.config.catalog import load_catalog

    try:
        if nvml_recording is not None:
            import pynvml

            from gpuplan.agent.telemetry.nvml import NvmlSource
            from gpuplan.agent.telemetry.recording import ReplayNvml

            recording = json.loads(nvml_recording.read_text(encoding="utf-8"))
            source: Any = NvmlSource(ReplayNvml(recording, pynvml))
        else:
            source = open_source(config.backend)
    except TelemetryError as exc:
        click.echo(f"gpuplan agent: {exc}", err=True)
        return 1
    runner = Agent(config, source, load_catalog(None))
    if config.once:
        ok = asyncio.run(runner.run_once())
        snapshot = runner.state.snapshot
        if snapshot is not None:
            sys.stdout.write(msgspec.json.format(msgspec.json.encode(snapshot)).decode() + "\n")
        source.close()
        return 0 if ok else 1
    asyncio.run(runner.run())
    return 0
