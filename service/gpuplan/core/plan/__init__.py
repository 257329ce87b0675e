"""The plan: a job's memory, recommendation and MIG fit, with a verdict per target.

``plan(request, catalog)`` is the one entry point; ``POST /v1/plan`` and
``gpuplan plan FILE`` call it. A plan file is a recommendation request plus
``targets`` (docs/ci.md).
"""

from gpuplan.core.plan.errors import InvalidPlan
from gpuplan.core.plan.plan import plan
from gpuplan.core.plan.schema import PlanFile, PlanReport

__all__ = ["InvalidPlan", "PlanFile", "PlanReport", "plan"]
