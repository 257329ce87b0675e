"""MIG planning over HTTP: profiles of a GPU, layout validation, packing plans, and
free instances of the live fleet."""

from typing import Any

from litestar import Request

from gpuplan.api.answers import Encoded
from gpuplan.api.compute import bounded
from gpuplan.api.routes.fleet import read_nodes
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.core import mig


@operation("GET", "/v1/mig/profiles", query=mig.ProfilesQuery, tags=["mig"])
async def mig_profiles(
    request: Request[Any, Any, Any], query: mig.ProfilesQuery
) -> mig.ProfilesResponse:
    """MIG profiles of a GPU: slices, usable memory, placements, engines, sources.

    `gpu` takes every catalog lookup form: `a100-sxm4-80gb`, `NVIDIA A100-SXM4-80GB`,
    `NVIDIA-A100-SXM4-80GB`, `0x20b2`. Fields not confirmed on hardware are listed in
    each profile's `unverified`. An unknown GPU or one without MIG answers 422.
    """
    return mig.profiles(query, runtime(request).catalog)


@operation(
    "POST",
    "/v1/mig/validate",
    body=mig.ValidateRequest,
    problems=(503,),
    tags=["mig"],
    remember=True,
)
async def mig_validate(
    request: Request[Any, Any, Any], body: mig.ValidateRequest
) -> Encoded[mig.ValidateResponse]:
    """Check a set of GPU instances (with optional start slots) as one GPU's layout.

    Answers whether it is valid, why not (overlap, no such placement, too many of a
    profile, compute or engines exceeded, no placement), stranded compute, and for a
    valid layout a placement and the creation order that yields it.
    """
    return await bounded(request, mig.validate, body, runtime(request).catalog)


@operation(
    "POST", "/v1/mig/plan", body=mig.PartitionRequest, problems=(503,), tags=["mig"], remember=True
)
async def mig_plan(
    request: Request[Any, Any, Any], body: mig.PartitionRequest
) -> Encoded[mig.PartitionResponse]:
    """Pack workloads onto the fewest MIG-partitioned GPUs.

    Workloads name a profile or give `memory_gib` (matched against usable memory) and
    `compute_slices`. The answer holds each GPU's placed instances, the lower bound
    and whether the count is proven minimal, unplaced workloads, utilisation and the
    Kubernetes resource names, plus what `output` asks for to apply it: the mig-parted
    config (the default), `resource.k8s.io/v1` ResourceClaimTemplates for NVIDIA's DRA
    driver (`dra`), the device plugin's names per MIG strategy (`device-plugin`). With
    `current`, plans incrementally around instances in use.
    """
    return await bounded(request, mig.partition, body, runtime(request).catalog)


@operation("GET", "/v1/mig/slices", query=mig.SlicesQuery, problems=(404, 503), tags=["mig"])
async def mig_slices(request: Request[Any, Any, Any], query: mig.SlicesQuery) -> mig.SlicesResponse:
    """Free MIG instances across the live fleet that fit a workload, best fit first.

    An instance fits when its usable memory (as its agent read it from the driver,
    never the number in the profile name) covers `memory_gib` and it has at least
    `compute_slices`. Best fit: least surplus memory, then least surplus compute, then
    node, GPU index and placement start. Filter by `node` and by `gpu` model (any
    catalog lookup form). Each item gives the Kubernetes resource name and whether the
    profile's data is unverified. An empty fleet is an empty list with a note; without
    Redis 404 (`fleet-not-configured`), while it is down 503.
    """
    state = runtime(request)
    nodes = await read_nodes(state, query.node)
    return mig.slices(query, nodes, state.catalog)
