"""MIG partition planning: profile and placement tables (data), layout validation,
optimal packing of workloads onto GPUs, incremental plans and mig-parted output.

Entry points, one per adapter call: :func:`profiles`, :func:`validate`, :func:`plan`,
and :func:`slices` (free instances of the live fleet, best fit first).
"""

from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.load import MigDataError, builtin_tables
from gpuplan.core.mig.plan import plan
from gpuplan.core.mig.profiles import profiles
from gpuplan.core.mig.schema import (
    FreeSlice,
    PlanRequest,
    PlanResponse,
    ProfilesQuery,
    ProfilesResponse,
    SlicesQuery,
    SlicesResponse,
    ValidateRequest,
    ValidateResponse,
)
from gpuplan.core.mig.slices import slices
from gpuplan.core.mig.validate import validate

__all__ = [
    "FreeSlice",
    "MigDataError",
    "MigInputError",
    "PlanRequest",
    "PlanResponse",
    "ProfilesQuery",
    "ProfilesResponse",
    "SlicesQuery",
    "SlicesResponse",
    "ValidateRequest",
    "ValidateResponse",
    "builtin_tables",
    "plan",
    "profiles",
    "slices",
    "validate",
]
