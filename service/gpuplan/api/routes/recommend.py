"""POST /v1/recommendations: which GPU, how many, and what it costs, for one job."""

from typing import Any

from litestar import Request

from gpuplan.api.answers import Encoded
from gpuplan.api.compute import bounded
from gpuplan.api.routing import operation
from gpuplan.api.runtime import runtime
from gpuplan.core.recommend import RecommendRequest, RecommendResponse, recommend


@operation(
    "POST",
    "/v1/recommendations",
    body=RecommendRequest,
    problems=(503,),
    tags=["recommend"],
    remember=True,
)
async def recommendations(
    request: Request[Any, Any, Any], body: RecommendRequest
) -> Encoded[RecommendResponse]:
    """Rank every catalog GPU and GPU count for a job by fit, time, cost and energy.

    The body is a memory-estimate request (`model`, `workload`) plus the `objective`
    (`cheapest`, `fastest`, `energy`, `balanced`), `constraints`, and the work: `training`
    (tokens, samples or epochs) or `inference` (requests per second, prompt and output
    lengths). The answer ranks each GPU's best plan, places the workload in the seed
    guide's scenario matrix, and advises changes that make it fit the preferred or the
    cheapest GPU. A request the core cannot plan answers 422 naming the field.
    """
    return await bounded(request, recommend, body, runtime(request).catalog)
