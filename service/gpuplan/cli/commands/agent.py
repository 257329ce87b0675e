"""``gpuplan agent``: the GPU agent sidecar's command line.

The options are the fields of :class:`~gpuplan.agent.config.AgentConfig`, generated as
the request commands' are, and each can be set as ``GPUPLAN_AGENT_<OPTION>``
(``GPUPLAN_AGENT_REDIS_URL``) through Click's environment support. Nothing heavy is
imported at module level, so ``gpuplan --help`` stays fast.
"""

import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import Any

import click

from gpuplan.agent.config import AgentConfig, default_node
from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import EXIT_FAILED, EXIT_OK, reported
from gpuplan.cli.options import field_options, with_options
from gpuplan.core.catalog import Catalog

ENV_PREFIX = "GPUPLAN_AGENT"

LEGACY = {
    "interval_seconds": ("--interval",),
    "benchmark_interval_seconds": ("--benchmark-interval",),
    "benchmark_timeout_seconds": ("--benchmark-timeout",),
}
"""Flags (and ``GPUPLAN_AGENT_*`` variables) the options had before they took the
config's field names with their units."""

FIELDS = field_options(AgentConfig, aliases=LEGACY)
for _field in FIELDS:
    _field.option.show_envvar = True
    _field.option.envvar = [f"{ENV_PREFIX}_{_field.name.upper()}"] + [
        f"{ENV_PREFIX}_{alias[2:].replace('-', '_').upper()}"
        for alias in LEGACY.get(_field.name, ())
    ]


@click.command(
    "agent",
    context_settings={"max_content_width": 100, "auto_envvar_prefix": ENV_PREFIX},
)
@with_options([f.option for f in FIELDS])
@catalog_option
@click.option(
    "--nvml-recording",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    hidden=True,
    help="Replay a recorded NVML session instead of the driver (demos, tests).",
)
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="info",
    show_default=True,
    help="Log threshold (logs go to stderr).",
)
def agent_command(
    nvml_recording: Path | None, log_level: str, catalog_file: Path | None, **options: Any
) -> None:
    """Run the GPU agent: telemetry and benchmarks to Prometheus and Redis.

    Telemetry comes from NVML (nvidia-ml-py) or amd-smi; without a GPU it runs in
    CPU mode and benchmarks the CPU. Needs the `agent` extra (and `torch` for
    benchmarks): pip install 'gpuplan[agent,torch]'.
    """
    from gpuplan.core.convert import convert

    logging.basicConfig(
        stream=sys.stderr,
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    values = {f.name: options[f.name] for f in FIELDS if options[f.name] is not None}
    values["node"] = values.get("node") or default_node()
    values["redis_url"] = values.get("redis_url") or None  # an empty variable: no Redis
    with reported("agent"):
        config = convert(values, AgentConfig)
        known = catalog(catalog_file)
    sys.exit(_run(config, nvml_recording, known))


def _run(config: AgentConfig, nvml_recording: Path | None, known: Catalog) -> int:
    import msgspec

    from gpuplan.agent.loop import Agent
    from gpuplan.agent.telemetry import TelemetryError, open_source

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
        return EXIT_FAILED
    runner = Agent(config, source, known)
    if config.once:
        ok = asyncio.run(runner.run_once())
        snapshot = runner.state.snapshot
        if snapshot is not None:
            sys.stdout.write(msgspec.json.format(msgspec.json.encode(snapshot)).decode() + "\n")
        source.close()
        return EXIT_OK if ok else EXIT_FAILED
    asyncio.run(runner.run())
    return EXIT_OK
