"""Small live fleets for the placement tests, built as an agent would publish them.

Each GPU is a MIG layout, a list of ``(profile, start, in_use)`` in the MIG table's
slots, or a whole GPU: ``"free"`` (not in MIG mode, no process) or ``"busy"``. Usable
memory is the table's, as the driver reports it on those GPUs.
"""

import time
from collections.abc import Sequence

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.fleet import CpuInfo, GpuTelemetry, MigInstance, NodeSnapshot
from gpuplan.core.mig import builtin_tables
from gpuplan.core.mig.model import MigGpu

H100 = "NVIDIA H100 80GB HBM3"
A30 = "NVIDIA A30"
RTX_PRO_6000 = "NVIDIA RTX PRO 6000 Blackwell Server Edition"

Layout = Sequence[tuple[str, int, bool]]


def table_of(model: str) -> MigGpu:
    spec = builtin_catalog().get(model)
    return next(t for t in builtin_tables() if spec.id in t.gpus)


def fleet_node(
    name: str, gpus: Sequence[Layout | str], model: str = H100, scale: int = 1
) -> NodeSnapshot:
    """A node of ``gpus`` of ``model``; ``scale`` NVML placement units per slot."""
    table = table_of(model)
    spec = builtin_catalog().get(model)
    total = spec.usable_memory_bytes or spec.memory_bytes
    telemetry: list[GpuTelemetry] = []
    instances: list[MigInstance] = []
    for index, gpu in enumerate(gpus):
        uuid = f"GPU-{name}-{index}"
        if isinstance(gpu, str):
            telemetry.append(
                GpuTelemetry(
                    index=index,
                    uuid=uuid,
                    model_name=model,
                    mig_enabled=False,
                    compute_processes=0 if gpu == "free" else 1,
                    memory_total_bytes=total,
                    memory_free_bytes=total - 2**29,
                )
            )
            continue
        telemetry.append(
            GpuTelemetry(
                index=index,
                uuid=uuid,
                model_name=model,
                mig_enabled=True,
                compute_processes=sum(1 for *_, used in gpu if used),
                memory_total_bytes=total,
            )
        )
        names = [p.name for p in table.profiles]
        for k, (profile, start, in_use) in enumerate(gpu):
            row = table.profiles[names.index(profile)]
            instances.append(
                MigInstance(
                    node=name,
                    gpu_index=index,
                    gpu_uuid=uuid,
                    gpu_model_name=model,
                    mig_uuid=f"MIG-{name}-{index}-{k}",
                    profile=profile,
                    gpu_instance_id=k + 1,
                    compute_instance_id=0,
                    placement_start=start * scale,
                    placement_size=row.memory_slices * scale,
                    memory_bytes=row.memory_bytes,
                    in_use=in_use,
                )
            )
    return NodeSnapshot(
        node=name,
        ts=time.time(),
        agent_version="test",
        vendor="nvidia",
        gpu_count=len(gpus),
        driver_version="580.95.05",
        interval_seconds=10.0,
        ttl_seconds=30.0,
        cpu=CpuInfo(model_name="test CPU", logical_cpus=8),
        gpus=telemetry,
        mig_instances=instances,
    )
