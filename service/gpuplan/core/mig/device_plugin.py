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

Workloads that share below MIG (:mod:`gpuplan.core.mig.sharing`) need the plugin's
``sharing`` config (``api/config/v1/sharing.go``: ``timeSlicing`` and ``mps``, each
``ReplicatedResources`` of ``renameByDefault``, ``failRequestsGreaterThanOne`` and
``resources: [{name, replicas}]``, ``api/config/v1/replicas.go``; "number of replicas
must be >= 2"). Sharing is per node, not per GPU, so each config is for the nodes it
names and goes to them by the label ``nvidia.com/device-plugin.config`` (README, "Updating
Per-Node Configuration With a Node Label"). ``failRequestsGreaterThanOne: true`` is the
README's recommendation ("Setting failRequestsGreaterThanOne=true is recommended"), so a
pod cannot take two replicas and believe it has more; ``renameByDefault: false`` keeps the
resource names of the plan.
"""

import yaml

from gpuplan.core.mig.schema import (
    DevicePluginOutput,
    DevicePluginResource,
    DevicePluginSharingConfig,
    MigStrategy,
    PartitionResponse,
    SharingPlan,
)

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
        sharing=sharing_configs(response.sharing, "single" if single else "mixed"),
    )


def sharing_configs(
    plan: SharingPlan | None, strategy: MigStrategy
) -> list[DevicePluginSharingConfig]:
    """The plugin's config files for the plan's hosts: time-slicing on the MIG nodes, MPS
    on nodes whose GPUs have MIG disabled."""
    if plan is None:
        return []
    out = []
    sliced = [h for h in plan.hosts if h.mode == "time-slicing" and h.replicas >= 2]
    if sliced:
        resources = [
            {
                "name": SINGLE_RESOURCE if strategy == "single" else h.resource,
                "replicas": h.replicas,
            }
            for h in sliced
        ]
        body = {
            "version": "v1",
            "flags": {"migStrategy": strategy},
            "sharing": {
                "timeSlicing": {
                    "renameByDefault": False,
                    "failRequestsGreaterThanOne": True,
                    "resources": resources,
                }
            },
        }
        out.append(
            DevicePluginSharingConfig(
                name="gpuplan-mig-time-slicing",
                applies_to="nodes with the plan's MIG GPUs (every instance of a host profile "
                "there is replicated)",
                config=yaml.safe_dump(body, sort_keys=False),
            )
        )
    for h in plan.hosts:
        if h.mode == "mps" and h.replicas >= 2:
            body = {
                "version": "v1",
                "flags": {"migStrategy": "none"},
                "sharing": {
                    "mps": {
                        "renameByDefault": False,
                        "resources": [{"name": SINGLE_RESOURCE, "replicas": h.replicas}],
                    }
                },
            }
            out.append(
                DevicePluginSharingConfig(
                    name="gpuplan-mps",
                    applies_to=f"nodes with the {h.hosts} whole GPU(s) MPS shares, MIG disabled",
                    config=yaml.safe_dump(body, sort_keys=False),
                )
            )
    return out
