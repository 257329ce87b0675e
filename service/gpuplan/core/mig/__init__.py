"""MIG partition planning: profile and placement tables (data), layout validation,
optimal packing of workloads onto GPUs, incremental plans and mig-parted output.

Entry points, one per adapter call: :func:`profiles`, :func:`validate`, :func:`partition`,
:func:`slices` (free instances of the live fleet, best fit first) and :func:`place`
(where a new workload goes on the live fleet, fewest disruptions first;
:func:`check_placement` checks its query without the fleet).
"""

from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.load import MigDataError, builtin_tables
from gpuplan.core.mig.partition import partition
from gpuplan.core.mig.placement import place
from gpuplan.core.mig.placement_query import check_placement
from gpuplan.core.mig.profiles import profiles
from gpuplan.core.mig.schema import (
    FreeSlice,
    PartitionRequest,
    PartitionResponse,
    PlacementOption,
    PlacementQuery,
    PlacementResponse,
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
    "PartitionRequest",
    "PartitionResponse",
    "PlacementOption",
    "PlacementQuery",
    "PlacementResponse",
    "ProfilesQuery",
    "ProfilesResponse",
    "SlicesQuery",
    "SlicesResponse",
    "ValidateRequest",
    "ValidateResponse",
    "builtin_tables",
    "check_placement",
    "partition",
    "place",
    "profiles",
    "slices",
    "validate",
]
