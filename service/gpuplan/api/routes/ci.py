"""POST /v1/plan: one call for a CI pipeline: memory, recommendation, MIG fit, verdicts.

The body is a plan file (docs/ci.md). When the service has Redis, the live fleet's
measured FLOP/s replace datasheet peaks for the GPU models it has (as
``measured_flops`` in the body would); without Redis, or while it is down, the plan
uses the catalog and says so in ``warnings``, never failing for it.
"""

import asyncio
from typing import Any

import msgspec
from litestar import Request
from redis.exceptions import RedisError

from gpuplan.api.answers import Encoded
from gpuplan.api.compute import bounded
from gpuplan.api.routing import operation
from gpuplan.api.runtime import Runtime, runtime
from gpuplan.core.ci import CiPlan, CiReport, check
from gpuplan.core.fleet import MeasuredFlops, measured_flops
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.store import FleetStore


async def _measured(state: Runtime) -> tuple[list[MeasuredFlops] | None, str | None]:
    if state.redis is None:
        return None, None
    store = FleetStore(state.redis, Keys(state.settings.fleet_key_prefix))
    try:
        async with asyncio.timeout(state.settings.redis_timeout_seconds * 4):
            nodes = await store.nodes()
    except (RedisError, OSError, TimeoutError):
        return None, "the fleet store (Redis) does not answer: planned with catalog FLOP/s"
    return measured_flops(nodes, state.catalog), None


@operation("POST", "/v1/plan", body=CiPlan, problems=(503,), tags=["plan"])
async def plan_job(request: Request[Any, Any, Any], body: CiPlan) -> Encoded[CiReport]:
    """Check a job's targets: fits, cost, time, MIG profile, memory headroom.

    The body is a recommendation request (`model`, `workload`, `objective`,
    `constraints`, `training` or `inference`) plus `targets`. The answer holds a
    verdict per target (`pass`/`fail`, the reason and the numbers), the memory
    estimate, the top `limit` recommendations, the smallest MIG profile holding the
    job on each MIG-capable GPU with its Kubernetes resource, advice, and `plan_id`,
    the hash of the normalized input. The same input gives byte-identical JSON.
    """
    state = runtime(request)
    measured, warning = await _measured(state)

    def planned() -> CiReport:
        report = check(body, state.catalog, measured)
        if warning is None:
            return report
        return msgspec.structs.replace(report, warnings=[*report.warnings, warning])

    # Not remembered: with Redis, the answer follows the live fleet, not the body alone.
    return await bounded(request, planned)
