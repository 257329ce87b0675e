"""nvidia-mig-parted configuration (``version: v1``) for a plan.

The format (NVIDIA/mig-parted ``api/spec/v1``): ``mig-configs`` maps a config name to
a list of entries, each with ``devices`` (a list of GPU indices or ``all``),
``mig-enabled`` and ``mig-devices`` (profile to count); ``device-filter`` restricts an
entry to PCI device ids written ``0x<device><vendor>``. A node applies one config,
chosen by the label ``nvidia.com/mig.config``. The text is written here, not by a YAML
library, so that it is byte-stable and every string is quoted.

mig-parted refuses a file without a config ("at least one entry in 'mig-configs' is
required"), so a plan that places no GPU still writes ``gpuplan-all``: one entry whose
``devices`` list is empty. mig-parted accepts an empty list and applies the entry to no
GPU, so a node labelled ``gpuplan-all`` is left as it is.

GPUs the plan runs with MIG disabled (the whole GPUs MPS clients share,
:mod:`gpuplan.core.mig.sharing`) are listed too, in an entry with ``mig-enabled: false``
and no ``mig-devices`` (``MigConfigSpec.UnmarshalJSON`` at NVIDIA/mig-parted commit
bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d requires only ``devices`` and ``mig-enabled``,
and refuses "MIG devices included when 'mig-enabled' is false"): the config
``gpuplan-mig-disabled`` holds them alone, and ``gpuplan-all`` holds them beside the MIG
layouts, so that every GPU of the plan is in it exactly once.
"""

from collections.abc import Sequence

from gpuplan.core.mig.model import MigGpu

Layout = tuple[str, list[int], list[tuple[str, int]]]
"""``(config name, device indices, [(profile, count)])``."""


MIG_DISABLED = "gpuplan-mig-disabled"


def _entry(
    devices: Sequence[int],
    counts: Sequence[tuple[str, int]] | None,
    device_filter: Sequence[str],
) -> list[str]:
    """One entry; ``counts`` None writes ``mig-enabled: false``."""
    lines = []
    first = "  - "
    if device_filter:
        lines.append(f"{first}device-filter: [{', '.join(repr_yaml(d) for d in device_filter)}]")
        first = "    "
    lines.append(f"{first}devices: [{', '.join(str(d) for d in devices)}]")
    if counts is None:
        lines.append("    mig-enabled: false")
        return lines
    lines.append("    mig-enabled: true")
    if counts:
        lines.append("    mig-devices:")
        lines.extend(f"      {repr_yaml(name)}: {n}" for name, n in counts)
    else:
        lines.append("    mig-devices: {}")
    return lines


def repr_yaml(text: str) -> str:
    """A double-quoted YAML scalar (the names hold only letters, digits, `.+-`)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render(
    layouts: Sequence[Layout], pci_device_ids: Sequence[str] = (), mig_disabled: Sequence[int] = ()
) -> str:
    """The config file: one config per layout, ``gpuplan-mig-disabled`` for the GPUs
    ``mig_disabled`` lists (when it lists any), and ``gpuplan-all`` with every entry."""
    device_filter = [f"0x{d[2:].upper()}10DE" for d in pci_device_ids]
    lines = ["version: v1", "mig-configs:"]
    if not layouts and not mig_disabled:
        lines.append(
            "  # No GPU is placed: this entry matches none, so applying it changes nothing."
        )
        lines.append("  gpuplan-all:")
        lines.extend("  " + line for line in _entry([], [], device_filter))
        return "\n".join(lines) + "\n"
    for name, devices, counts in layouts:
        lines.append(f"  {name}:")
        lines.extend("  " + line for line in _entry(devices, counts, device_filter))
    if mig_disabled:
        lines.append(f"  {MIG_DISABLED}:")
        lines.extend("  " + line for line in _entry(mig_disabled, None, device_filter))
    lines.append("  gpuplan-all:")
    for _, devices, counts in layouts:
        lines.extend("  " + line for line in _entry(devices, counts, device_filter))
    if mig_disabled:
        lines.extend("  " + line for line in _entry(mig_disabled, None, device_filter))
    return "\n".join(lines) + "\n"


def counts_of(table: MigGpu, counts: Sequence[int]) -> list[tuple[str, int]]:
    return [(p.name, n) for p, n in zip(table.profiles, counts, strict=True) if n]
