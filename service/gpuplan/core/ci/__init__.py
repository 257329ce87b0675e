"""The CI plan: a job's memory, recommendation and MIG fit, with a verdict per target.

``check(plan, catalog)`` is the one entry point; ``POST /v1/plan`` and
``gpuplan plan FILE`` call it. A plan file is a recommendation request plus
``targets`` (docs/ci.md).
"""

from gpuplan.core.ci.check import check
from gpuplan.core.ci.errors import InvalidCiPlan
from gpuplan.core.ci.schema import CiPlan, CiReport

__all__ = ["CiPlan", "CiReport", "InvalidCiPlan", "check"]
