"""What a partition answer carries to apply it, as the request's ``output`` asks.

The placements are the plan; how a cluster applies them depends on its stack (see
docs/scheduling.md): the nvidia-mig-parted config creates the layouts (GPU Operator's
MIG manager, or DRA without DynamicMIG), ResourceClaimTemplates request the planned
profiles from NVIDIA's DRA driver, and the device plugin's resource names request them
from the device plugin. ``resources`` and ``single_strategy`` are always answered, so a
client that asks nothing new sees the answer it always had.
"""

from collections.abc import Sequence

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.mig.device_plugin import device_plugin_output
from gpuplan.core.mig.dra import dra_output
from gpuplan.core.mig.errors import MigInputError
from gpuplan.core.mig.schema import PartitionResponse, PlanOutput


def check(output: Sequence[PlanOutput]) -> None:
    """Refuse an output named twice (the schema checks the names and the length)."""
    seen: set[str] = set()
    for i, name in enumerate(output):
        if name in seen:
            raise MigInputError(f"$.output[{i}]", f"`{name}` is listed twice")
        seen.add(name)


def attach(
    output: Sequence[PlanOutput], spec: GpuSpec, response: PartitionResponse
) -> PartitionResponse:
    """``response`` with the outputs ``output`` names, and without the config it does not."""
    return msgspec.structs.replace(
        response,
        mig_parted_config=response.mig_parted_config if "mig-parted" in output else None,
        device_plugin=device_plugin_output(response) if "device-plugin" in output else None,
        dra=dra_output(spec, response.resources, response.sharing) if "dra" in output else None,
    )
