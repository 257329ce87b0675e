"""Candidate candidates as text: the ranking table and the lines every report shares."""

from gpuplan.cli.render.output import GiB, num
from gpuplan.core.recommend.schema import Advice, ParallelLayout, RecommendResponse


def layout(lay: ParallelLayout | None, missing: str = "-") -> str:
    """``t2p1d4z3``: tensor, pipeline, data parallel degrees and ZeRO stage, then context
    (``c``), virtual stages (``v``) and expert (``e``) degrees where they are above 1."""
    if lay is None:
        return missing
    extra = "".join(
        f"{letter}{n}"
        for letter, n in (("c", lay.context), ("v", lay.virtual_stages), ("e", lay.expert))
        if n > 1
    )
    return f"t{lay.tensor}p{lay.pipeline}d{lay.data}z{lay.zero_stage}{extra}"


def advice_line(a: Advice, times: str = "x") -> str:
    """One advice: the change, its figures (from the fields), then its detail."""
    verdict = "fits" if a.fits_after else "still too big"
    factor = f", time {times}{a.time_factor:.2f}" if a.time_factor is not None else ""
    if a.count > 1 and a.gpu_hours_factor is not None:
        factor += f", GPU-hours {times}{a.gpu_hours_factor:.2f}"
    where = f"{a.count} x {a.gpu}" if a.count > 1 else a.gpu
    return (
        f"advice [{where}]: {a.change}: {a.required_bytes_before / GiB:.1f} -> "
        f"{a.required_bytes_after / GiB:.1f} GiB per GPU, {verdict}{factor}. {a.detail}"
    )


def table(response: RecommendResponse) -> str:
    serving = response.workload_kind == "inference"
    middle = f"{'in flight':>9} {'TTFT ms':>8} {'TPOT ms':>8}" if serving else f"{'hours':>9}"
    lines = [
        f"objective: {response.objective}   scenario: {response.scenario.class_} "
        f"({response.scenario.band})",
        f"{'#':>3} {'gpu':<18} {'n':>4} {'layout':<14} {'GiB/GPU':>8} {'mem%':>5} "
        f"{'tokens/s':>10} {middle} {'USD':>11} {'kWh':>9} {'score':>6}",
    ]
    for i, r in enumerate(response.recommendations, 1):
        tput = r.throughput.value if r.throughput else None
        fit = (
            " (no fit)"
            if not r.fits
            else f" (misses {', '.join(b.constraint for b in r.breaches)})"
            if r.breaches
            else ""
        )
        if serving:
            lat = r.latency
            middle = (
                f"{num(lat.concurrency if lat else None, 'd'):>9} "
                f"{num(lat.time_to_first_token_s * 1000 if lat else None, ',.0f'):>8} "
                f"{num(lat.time_per_output_token_s * 1000 if lat else None, ',.1f'):>8}"
            )
        else:
            middle = f"{num(r.time_hours, ',.2f'):>9}"
        lines.append(
            f"{i:>3} {r.gpu:<18} {r.count:>4} {layout(r.layout):<14} "
            f"{r.required_bytes_per_gpu / GiB:>8.1f} {r.memory_utilization:>5.0%} "
            f"{num(tput, ',.0f'):>10} {middle} "
            f"{num(r.cost_usd, ',.2f'):>11} {num(r.energy_kwh, ',.1f'):>9} {r.score:>6.3f}{fit}"
        )
    lines += [advice_line(a) for a in response.advice]
    if response.hybrid is not None:
        lines.append(f"hybrid: {response.hybrid.detail}")
    lines += [f"warning: {w}" for w in response.warnings]
    return "\n".join(lines) + "\n"
