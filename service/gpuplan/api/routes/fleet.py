"""The live fleet over HTTP: what the agents published, read from Redis.

A node whose agent stopped publishing drops out once its keys expire (three
publish intervals): the API never shows a stale node as live. A server without Redis
answers 404 ``fleet-not-configured`` (it has no fleet, and never will until configured),
one whose Redis is down 503 with ``Retry-After``, so a client can tell "no data" from
"no nodes"; the planning routes keep working either way.
"""

import asyncio
from typing import Any

from litestar import Request
from redis.exceptions import RedisError

from gpuplan.api.answers import Encoded
from gpuplan.api.compute import bounded
from gpuplan.api.problems import FleetNotConfigured, FleetUnavailable, UnknownNode
from gpuplan.api.routing import operation
from gpuplan.api.runtime import Runtime, runtime
from gpuplan.core import mig
from gpuplan.core.errors import Location
from gpuplan.core.fleet import MeasuredFlops, NodeList, NodeSnapshot, measured_flops
from gpuplan.core.record import Record
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.store import FleetStore


class MeasuredFlopsList(Record):
    """Measured matmul FLOP/s per catalog GPU model and dtype across live nodes."""

    count: int
    models: list[MeasuredFlops]


def _store(state: Runtime) -> FleetStore:
    if state.redis is None:
        raise FleetNotConfigured(
            "this server has no live fleet: it needs Redis (set GPUPLAN_REDIS_URL, the "
            "store the GPU agents publish to); planning routes answer without it"
        )
    return FleetStore(state.redis, Keys(state.settings.fleet_key_prefix))


async def read_nodes(state: Runtime, node: str | None = None) -> list[NodeSnapshot]:
    """Live nodes (or the one named); :class:`FleetNotConfigured` (404) without Redis,
    :class:`FleetUnavailable` (503) while it does not answer.

    Shared by every route that reads the fleet, so all answer alike without Redis.
    """
    store = _store(state)
    try:
        async with asyncio.timeout(state.settings.redis_timeout_seconds * 4):
            if node is None:
                return await store.nodes()
            found = await store.node(node)
            return [] if found is None else [found]
    except (RedisError, OSError, TimeoutError):
        raise FleetUnavailable("the fleet store (Redis) does not answer; retry later") from None


@operation("GET", "/v1/fleet/nodes", problems=(404, 503), tags=["fleet"])
async def list_nodes(request: Request[Any, Any, Any]) -> NodeList:
    """Live nodes with their GPUs, MIG instances and latest benchmark, sorted by name.

    A node is live while its agent keeps publishing; it drops out three publish
    intervals after the agent stops. Answers 404 without Redis, 503 while it is down.
    """
    nodes = await read_nodes(runtime(request))
    return NodeList(count=len(nodes), nodes=nodes)


@operation("GET", "/v1/fleet/nodes/{node:str}", problems=(404, 503), tags=["fleet"])
async def get_node(request: Request[Any, Any, Any], node: str) -> NodeSnapshot:
    """One live node. Answers 404 for a node that is unknown or stale."""
    found = await read_nodes(runtime(request), node)
    if not found:
        raise UnknownNode(node)
    return found[0]


@operation("GET", "/v1/fleet/flops", problems=(404, 503), tags=["fleet"])
async def fleet_flops(request: Request[Any, Any, Any]) -> MeasuredFlopsList:
    """Measured matmul FLOP/s per catalog GPU model and dtype, over live nodes.

    The median over the GPUs of a model that were benchmarked, with the spread and
    the ratio to the catalog's dense peak; what planning uses instead of the
    datasheet for models present in the fleet.
    """
    state = runtime(request)
    models = measured_flops(await read_nodes(state), state.catalog)
    return MeasuredFlopsList(count=len(models), models=models)


async def _placements(
    request: Request[Any, Any, Any], query: mig.PlacementQuery, location: Location
) -> Encoded[mig.PlacementResponse]:
    state = runtime(request)
    # A bad query is refused before the fleet is read: 422, even without Redis.
    mig.check_placement(query, state.catalog, location=location)
    nodes = await read_nodes(state, query.node)
    return await bounded(request, mig.place, query, nodes, state.catalog, None, location)


@operation(
    "GET", "/v1/fleet/placements", query=mig.PlacementQuery, problems=(404, 503), tags=["fleet"]
)
async def fleet_placements(
    request: Request[Any, Any, Any], query: mig.PlacementQuery
) -> Encoded[mig.PlacementResponse]:
    """Where a new workload goes on the live fleet, fewest disruptions first.

    The workload names a MIG `profile`, or gives `memory_gib` (matched against usable
    memory) and `compute_slices`; `whole_gpu` also lets a free GPU without MIG take it.
    Options, least disruptive first: a free instance or free GPU (`none`), a new GPU
    instance in free slices (`create`), idle instances destroyed or MIG enabled on an
    idle GPU (`repartition-idle`), and only when nothing else exists the fewest
    instances in use to drain (`drain`). Each says where (node, GPU, profile, start),
    what it destroys, the layout after, the nvidia-smi commands, the Kubernetes
    resource and why. Without Redis 404 (`fleet-not-configured`), while it is down 503.
    """
    return await _placements(request, query, "query")


@operation(
    "POST", "/v1/fleet/placements", body=mig.PlacementQuery, problems=(404, 503), tags=["fleet"]
)
async def place_workload(
    request: Request[Any, Any, Any], body: mig.PlacementQuery
) -> Encoded[mig.PlacementResponse]:
    """Where a new workload goes on the live fleet (the query as a JSON body).

    The same question and answer as `GET /v1/fleet/placements`, for clients that send
    the workload as a document (`gpuplan fleet place` takes the same fields).
    """
    return await _placements(request, body, "body")
