"""``gpuplan fleet``: questions about the live fleet, answered locally.

``place`` answers what ``GET``/``POST /v1/fleet/placements`` answers: where a new
workload goes, fewest disruptions first. Its workload flags are the fields of the API's
query (:class:`~gpuplan.core.mig.PlacementQuery`), generated, so a bad value is refused
naming the same JSONPath. The fleet is read from the Redis the agents publish to
(``--redis-url``, else ``GPUPLAN_REDIS_URL``, under ``--key-prefix``, else
``GPUPLAN_FLEET_KEY_PREFIX``; the password from ``--redis-password-file``, else
``GPUPLAN_REDIS_PASSWORD_FILE``, as the server reads them), or from a file holding ``GET /v1/fleet/nodes``'s answer
(``--nodes``: a saved fleet, or one to try a placement on). Exit status: 0 an option
exists, 1 none does, 2 unusable input, 3 the fleet's Redis does not answer.
"""

import asyncio
import sys
from pathlib import Path
from typing import Any

import click

from gpuplan.cli.context import catalog, catalog_option
from gpuplan.cli.errors import EXIT_FAILED, Unavailable, reported
from gpuplan.cli.options import field_options, request_document, with_options
from gpuplan.cli.render import placement as render
from gpuplan.cli.render.output import MACHINE_FORMATS, machine, write
from gpuplan.core.fleet import NodeList, NodeSnapshot
from gpuplan.core.mig.schema import PlacementQuery

FIELDS = field_options(PlacementQuery)

DEFAULT_PREFIX = "gpuplan:v1:"


@click.group("fleet")
def fleet_command() -> None:
    """Ask about the live fleet the GPU agents publish (as /v1/fleet/* does)."""


@fleet_command.command("place")
@click.option(
    "-f",
    "--file",
    "request_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The workload as a file (YAML, JSON or TOML) of POST /v1/fleet/placements's body; "
    "flags override its fields.",
)
@with_options([f.option for f in FIELDS])
@click.option(
    "--nodes",
    "nodes_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the fleet from this file (GET /v1/fleet/nodes's answer) instead of Redis.",
)
@click.option(
    "--redis-url",
    envvar="GPUPLAN_REDIS_URL",
    show_envvar=True,
    help="The Redis the agents publish to (redis://, rediss:// or unix://).",
)
@click.option(
    "--redis-password-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar="GPUPLAN_REDIS_PASSWORD_FILE",
    show_envvar=True,
    help="A file holding the Redis password (a mounted secret); wins over one in the URL.",
)
@click.option(
    "--key-prefix",
    envvar="GPUPLAN_FLEET_KEY_PREFIX",
    show_envvar=True,
    default=DEFAULT_PREFIX,
    show_default=True,
    help="Prefix of the fleet's Redis keys (the agents' --key-prefix).",
)
@click.option(
    "--output",
    "fmt",
    type=click.Choice(["table", *MACHINE_FORMATS]),
    default="table",
    show_default=True,
    help="The options as a table with the first one's commands, or the API's answer.",
)
@catalog_option
def place_command(
    *,
    request_file: Path | None,
    nodes_file: Path | None,
    redis_url: str | None,
    redis_password_file: Path | None,
    key_prefix: str,
    fmt: str,
    catalog_file: Path | None,
    **values: Any,
) -> None:
    """Where a new workload goes on the live fleet, fewest disruptions first.

    A free instance, a free placement, an idle GPU to repartition and, only when
    nothing else works, the fewest instances to drain; each with its commands.

    \b
    Examples:
      gpuplan fleet place --memory-gib 20 --compute-slices 2
      gpuplan fleet place --profile 3g.40gb --node gpu-node-7 --output json
      gpuplan fleet place --memory-gib 70 --whole-gpu --nodes fleet.json
    """
    from gpuplan.core.convert import convert
    from gpuplan.core.mig import check_placement, place

    if nodes_file is None and not redis_url:
        raise click.UsageError(
            "the fleet is read from Redis (--redis-url or GPUPLAN_REDIS_URL) or from a "
            "file (--nodes)"
        )
    with reported("fleet place", request_file):
        query = convert(request_document(request_file, values, FIELDS), PlacementQuery)
        known = catalog(catalog_file)
        check_placement(query, known)
    with reported("fleet place", nodes_file):
        if nodes_file is not None:
            nodes = _from_file(nodes_file)
        else:
            assert redis_url is not None
            password = _password(redis_password_file)
            nodes = asyncio.run(_from_redis(redis_url, password, key_prefix, query.node))
        result = place(query, nodes, known)
    write(render.table(result) if fmt == "table" else machine(result, fmt))
    if not result.options:
        sys.exit(EXIT_FAILED)


def _from_file(path: Path) -> list[NodeSnapshot]:
    from gpuplan.config.documents import read_document
    from gpuplan.core.convert import convert

    return convert(read_document(path), NodeList).nodes


def _password(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"cannot read {path}: {exc.__class__.__name__}", param_hint="--redis-password-file"
        ) from None


async def _from_redis(
    url: str, password: str | None, prefix: str, node: str | None
) -> list[NodeSnapshot]:
    from redis.exceptions import RedisError

    from gpuplan.fleet.connection import connect
    from gpuplan.fleet.schema import Keys
    from gpuplan.fleet.store import FleetStore

    client = connect(url, timeout_seconds=2.0, password=password)
    try:
        store = FleetStore(client, Keys(prefix))
        if node is None:
            return await store.nodes()
        found = await store.node(node)
        return [] if found is None else [found]
    except (RedisError, OSError, TimeoutError) as exc:
        raise Unavailable(f"the fleet's Redis does not answer: {exc.__class__.__name__}") from None
    finally:
        await client.aclose()
