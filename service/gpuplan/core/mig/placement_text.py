"""The words of a placement option: what to run, in order, and why it is the option.

The commands are nvidia-smi's (NVIDIA's MIG User Guide): ``-cgi`` takes a profile name
or ID with an optional ``:start`` placement (NVML's units), ``-C`` also creates the
default compute instance; ``-dci`` and ``-dgi`` with ``-gi ID`` destroy one GPU
instance's compute instances and then the GPU instance; ``-mig 1`` enables MIG mode,
which resets the GPU. nvidia-mig-parted is named only for a GPU with nothing in use:
it clears the whole GPU before it creates a layout. A Kubernetes pod then requests
the instance's extended resource (NVIDIA's device plugin, ``migStrategy: mixed``) once
the plugin advertises it.
"""

import msgspec

from gpuplan.core.mig.fleetview import FleetGpu
from gpuplan.core.mig.schema import PlacementInstance, PlacementOption
from gpuplan.core.mig.words import gib


def _at(item: PlacementInstance) -> str:
    where = "" if item.placement_start is None else f" at {item.placement_start}"
    return f"{item.profile}{where}"


def _and(text: str) -> str:
    return f", {text}" if text else ""


def _listed(items: list[PlacementInstance]) -> str:
    return ", ".join(_at(i) for i in items)


def _request(option: PlacementOption, created: bool) -> str:
    wait = " once the device plugin advertises it" if created else ""
    if option.profile is None:
        return (
            f"request `{option.resource}` for the pod on node {option.node}, or run it there "
            f"with CUDA_VISIBLE_DEVICES={option.gpu_uuid}"
        )
    device = (
        f", or run it there with CUDA_VISIBLE_DEVICES={option.mig_uuid}" if option.mig_uuid else ""
    )
    return (
        f"request `{option.resource}` for the pod on node {option.node}{wait} (NVIDIA's "
        f"device plugin, migStrategy mixed){device}"
    )


def _create(option: PlacementOption, gpu: FleetGpu) -> str:
    placed = f":{option.placement_start}" if gpu.scale_known else ""
    where = (
        f"lands at {option.placement_start}"
        if gpu.scale_known
        else f"the driver's first-fit places it at slot {option.placement_start}"
    )
    return (
        f"on node {option.node}: nvidia-smi mig -i {option.gpu_index} -cgi "
        f"{option.profile}{placed} -C (a {option.profile} GPU instance with its compute "
        f"instance; {where})"
    )


def _destroy(option: PlacementOption, item: PlacementInstance) -> str:
    state = "in use, drained" if item.in_use else "idle"
    return (
        f"on node {option.node}: nvidia-smi mig -i {option.gpu_index} -gi "
        f"{item.gpu_instance_id} -dci, then nvidia-smi mig -i {option.gpu_index} -gi "
        f"{item.gpu_instance_id} -dgi (destroys the {_at(item)}, {state})"
    )


def steps(option: PlacementOption, gpu: FleetGpu) -> PlacementOption:
    """``option`` with the commands that carry it out, in order."""
    out: list[str] = []
    if option.action in ("use-instance", "use-gpu"):
        out.append(_request(option, created=False))
        return msgspec.structs.replace(option, steps=out)
    if option.action == "enable-mig":
        out.append(
            f"on node {option.node}: nvidia-smi -i {option.gpu_index} -mig 1 (enables MIG "
            "mode; the GPU resets, and nothing runs on it)"
        )
    for item in option.destroy:
        if item.in_use:
            devices = ", ".join(item.mig_uuids)
            out.append(
                f"drain the workloads on {devices} ({_at(item)}, in use): evict their pods "
                "or stop their processes"
            )
    out.extend(_destroy(option, item) for item in option.destroy)
    out.append(_create(option, gpu))
    busy = any(i.in_use for i in option.layout_after)
    if not busy and option.action != "create":
        out.append(
            f"or, as nothing on GPU {option.gpu_index} is in use then, apply an "
            "nvidia-mig-parted config whose entry for this device (mig-enabled: true) holds "
            "`layout_after` instead of the commands above (it clears the GPU first)"
        )
    out.append(_request(option, created=True))
    return msgspec.structs.replace(option, steps=out)


def explain(option: PlacementOption, by_memory: bool) -> PlacementOption:
    """``option`` with the reason it is what it is (``by_memory``: the workload gave
    ``memory_gib``, so the memory to spare means something)."""
    kept_in_use = sum(1 for i in option.layout_after if i.in_use)
    spare = f"{gib(option.surplus_memory_bytes)} to spare" if by_memory else ""
    if option.action == "use-instance":
        reason = (
            f"a free {option.profile} instance ({gib(option.memory_bytes)} usable, "
            f"{option.compute_slices} compute slice(s)) takes it as it is{_and(spare)}: "
            "nothing changes"
        )
    elif option.action == "use-gpu":
        reason = (
            f"GPU {option.gpu_index} of {option.node} is free and not in MIG mode; its "
            f"{gib(option.memory_bytes)} free take the workload whole{_and(spare)}: nothing "
            "changes"
        )
    elif option.action == "enable-mig":
        reason = (
            f"GPU {option.gpu_index} of {option.node} is free and not in MIG mode: enabling "
            f"MIG and creating a {option.profile} ({gib(option.memory_bytes)} usable"
            f"{_and(spare)}) touches nothing in use"
        )
    else:
        new = f"a new {option.profile} ({gib(option.memory_bytes)} usable{_and(spare)})"
        others = (
            f"the {kept_in_use} instance(s) in use there keep running"
            if kept_in_use
            else "nothing else there is in use"
        )
        if option.action == "create":
            neighbours = len(option.layout_after) - 1
            reason = (
                f"{new} fits in free slices of GPU {option.gpu_index} of {option.node}, "
                f"beside its {neighbours} instance(s), none of them touched"
            )
        elif option.action == "repartition":
            idle = [i for i in option.destroy if not i.in_use]
            reason = (
                f"{new} fits on GPU {option.gpu_index} of {option.node} once {len(idle)} idle "
                f"instance(s) ({_listed(idle)}) are destroyed; {others}"
            )
        else:
            drained = [i for i in option.destroy if i.in_use]
            idle = [i for i in option.destroy if not i.in_use]
            also = f" and {len(idle)} idle one(s) ({_listed(idle)}) destroyed" if idle else ""
            reason = (
                f"{new} fits on GPU {option.gpu_index} of {option.node} once {len(drained)} "
                f"instance(s) in use ({_listed(drained)}) are drained{also}; {others}"
            )
    return msgspec.structs.replace(option, reason=reason)
