"""The resource names NVIDIA's device plugin gives a plan's MIG devices, per strategy.

NVIDIA/k8s-device-plugin (read at v0.20.0, commit 1b826acc6af3079d8923bac395c3124b8861a9a6)
exposes MIG devices by its ``migStrategy``:

- ``mixed``: one resource per profile, ``nvidia.com/mig-<profile>`` with ``+`` written
  ``.`` (``internal/rm/rm.go``: ``strings.ReplaceAll("mig-"+p.String(), "+", ".")``);
  :func:`gpuplan.core.mig.tables.resource_name`.
- ``single``: every MIG device is an ``nvidia.com/gpu``; GPU Feature Discovery refuses
  the strategy on a node whose MIG devices are of more than one profile, or that mixes
  MIG-enabled and MIG-disabled GPUs (``internal/lm/mig-strategy.go``,
  ``newMigStrategySingleLabeler``: "more than one MIG device type present on node").

So ``single`` serves a plan only when every GPU carries one profile, which
``single_strategy`` already decides; ``mixed`` serves any plan.
"""

from gpuplan.core.mig.schema import DevicePluginOutput, DevicePluginResource, PartitionResponse

SINGLE_RESOURCE = "nvidia.com/gpu"


def device_plugin_output(response: PartitionResponse) -> DevicePluginOutput:
    """Each workload's resource under both strategies, and the strategy to set."""
    single = response.single_strategy.possible
    return DevicePluginOutput(
        strategy="single" if single else "mixed",
        resources=[
            DevicePluginResource(
                workload=r.workload,
                profile=r.profile,
                count=r.count,
                mixed=r.resource,
                single=SINGLE_RESOURCE if single else None,
            )
            for r in response.resources
        ],
    )
