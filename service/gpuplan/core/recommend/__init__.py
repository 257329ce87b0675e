"""GPU recommendation: rank every catalog GPU and count for a job by fit, time, cost and energy.

``recommend(request, catalog)`` is the one entry point; the API route and the CLI
call it. It uses the memory estimator for fit and :mod:`gpuplan.core.perf` for speed,
cost and energy.
"""

from gpuplan.core.recommend.errors import InvalidRecommendation
from gpuplan.core.recommend.rank import recommend
from gpuplan.core.recommend.schema import RecommendRequest, RecommendResponse

__all__ = ["InvalidRecommendation", "RecommendRequest", "RecommendResponse", "recommend"]
