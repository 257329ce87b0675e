"""The memory estimate as a terminal table."""

import msgspec

from gpuplan.cli.render.output import GiB
from gpuplan.core.memory.schema import EstimateResponse


def _size(n: int) -> str:
    return f"{n / GiB:9.2f} GiB  ({n / 1e9:8.2f} GB)"


def table(r: EstimateResponse) -> str:
    b = r.breakdown
    lines = [
        f"parameters            {r.parameters:,} ({r.trainable_parameters:,} trainable)",
        f"peak phase            {r.peak_phase}",
        *(
            f"  {name.removesuffix('_bytes'):<20s}{_size(value)}"
            for name, value in msgspec.structs.asdict(b).items()
            if value
        ),
        f"peak_bytes            {_size(r.peak_bytes)}  (max_memory_allocated)",
        f"reserved_bytes        {_size(r.reserved_bytes)}  (max_memory_reserved)",
        f"device_bytes          {_size(r.device_bytes)}  (nvidia-smi)",
        f"required_bytes        {_size(r.required_bytes)}  (+{r.headroom_fraction:.0%} headroom)",
    ]
    if r.fit is not None:
        verdict = "fits" if r.fit.fits else "does NOT fit"
        lines.append(
            f"{r.fit.gpu}: {verdict} ({r.fit.utilization:.0%} of "
            f"{r.fit.usable_memory_bytes / GiB:.1f} GiB usable)"
        )
        if not r.fit.fits:
            lines.append(
                f"  to make it fit: gpuplan recommend with these flags, --preferred-gpu "
                f"{r.fit.gpu} (and --tokens when training) lists changes and their effect"
            )
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines) + "\n"
