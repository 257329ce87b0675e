"""Candidates as text: the ranking table and the lines every report shares."""

from collections.abc import Sequence

from gpuplan.cli.render.output import GiB, num
from gpuplan.core.recommend.schema import (
    Advice,
    Candidate,
    ParallelLayout,
    PriceBasis,
    RecommendResponse,
)


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


def price_cell(c: Candidate, missing: str = "-") -> str:
    """The price per GPU-hour a candidate's cost uses and whose it is: ``6.88 aws``."""
    if c.price is None:
        return missing
    return f"{c.price.usd_per_gpu_hour:,.2f} {c.price.provider}"


def score_cell(score: float | None, missing: str = "-") -> str:
    """A score, or ``missing`` for an unscored (unpriced) plan."""
    return missing if score is None else f"{score:.3f}"


def basis_line(basis: PriceBasis) -> str:
    """The price basis in one line, with the GPUs it leaves unpriced."""
    unpriced = f"; no price for {len(basis.unpriced)} GPU(s)" if basis.unpriced else ""
    return f"prices: {basis.detail}{unpriced}"


def advice_lines(advice: Sequence[Advice]) -> list[str]:
    """The advice under one heading per GPU it is for, a line per change: the GPU once,
    not at the head of every line."""
    out: list[str] = []
    for gpu in dict.fromkeys(a.gpu for a in advice):
        out.append(f"advice for {gpu}, where the job as written does not fit:")
        out += [f"  - {advice_text(a)}" for a in advice if a.gpu == gpu]
    return out


def advice_text(a: Advice) -> str:
    """One change with its figures, from the fields (the detail does not repeat them)."""
    verdict = "fits" if a.fits_after else "still too big"
    factor = f", time x{a.time_factor:.2f}" if a.time_factor is not None else ""
    if a.count > 1 and a.gpu_hours_factor is not None:
        factor += f", GPU-hours x{a.gpu_hours_factor:.2f}"
    on = f" on {a.count} GPUs" if a.count > 1 else ""
    return (
        f"{a.change}: {a.required_bytes_before / GiB:.1f} -> {a.required_bytes_after / GiB:.1f} "
        f"GiB per GPU{on}, {verdict}{factor}. {a.detail}"
    )


def launch_lines(candidates: Sequence[Candidate]) -> list[str]:
    """The command that runs the best serving plan that fits: its replicas, what each
    replica's pod asks of Kubernetes, and the engine's command line."""
    for i, r in enumerate(candidates, 1):
        run = r.launch
        if run is None or not r.fits:
            continue
        limits = ", ".join(f"{k}: {v}" for k, v in run.resources.limits.items())
        version = f" {run.engine_version}" if run.engine_version else ""
        return [
            f"launch #{i} {r.gpu} with {run.engine}{version}: {run.replicas} replica(s) of "
            f"{run.tensor_parallel} GPU(s), each pod's limits {limits}",
            f"  {run.shell}",
            *(f"  note: {n}" for n in run.notes),
            *_load_line(r),
        ]
    return []


def disaggregation_lines(candidates: Sequence[Candidate]) -> list[str]:
    """The aggregated-versus-disaggregated verdict of the best serving plan that has one
    (``inference.compare_disaggregated``)."""
    for i, r in enumerate(candidates, 1):
        d = r.disaggregation
        if d is None:
            continue
        ratio = f" ({d.ratio})" if d.ratio else ""
        return [f"disaggregation #{i} {r.gpu}: {d.winner} wins{ratio}: {d.why}"]
    return []


def _load_line(r: Candidate) -> list[str]:
    """The percentiles under the request rate (``latency.under_load``), if any."""
    u = r.latency.under_load if r.latency is not None else None
    if u is None:
        return []
    ft, fp = u.time_to_first_token_s, u.time_per_output_token_s
    return [
        f"  under load ({u.requests_per_s:.3g} requests/s per replica, Poisson): TTFT "
        f"p50/p95/p99 {ft.p50 * 1e3:,.0f}/{ft.p95 * 1e3:,.0f}/{ft.p99 * 1e3:,.0f} ms, TPOT "
        f"{fp.p50 * 1e3:.1f}/{fp.p95 * 1e3:.1f}/{fp.p99 * 1e3:.1f} ms"
    ]


TOP = 10
"""Candidates a terminal table shows unless asked for all: past the tenth, a ranking is
mostly GPUs that are slower and dearer, or do not fit."""


def mark(r: Candidate) -> str:
    """Why a row's score is 0, or what it misses: ``(no fit)``, ``(misses …)``, ``(no
    price)`` (it fits, but without a price it cannot be scored on cost)."""
    if not r.fits:
        return " (no fit)"
    if r.breaches:
        return f" (misses {', '.join(b.constraint for b in r.breaches)})"
    if r.cost_usd is None:
        return " (no price)"
    return ""


def more_line(shown: int, total: int) -> list[str]:
    """The line that says how many candidates the table left out and how to see them."""
    more = total - shown
    if more <= 0:
        return []
    return [f"    ... {more} more candidate{'s' if more != 1 else ''}: --all prints them"]


def table(response: RecommendResponse, top: int | None = TOP) -> str:
    """The ranking as a terminal table: the first ``top`` candidates (all with None),
    then a line saying how many more there are."""
    shown = response.recommendations[:top] if top is not None else response.recommendations
    serving = response.workload_kind == "inference"
    width = max([len("gpu"), *(len(r.gpu) for r in shown)])
    middle = f"{'in flight':>9} {'TTFT ms':>8} {'TPOT ms':>8}" if serving else f"{'hours':>9}"
    lines = [
        f"objective: {response.objective}   scenario: {response.scenario.class_} "
        f"({response.scenario.band})",
        basis_line(response.price_basis),
        f"{'#':>3} {'gpu':<{width}} {'n':>4} {'layout':<14} {'GiB/GPU':>8} {'mem%':>5} "
        f"{'tokens/s':>10} {middle} {'USD':>11} {'USD/GPU-h':>16} {'kWh':>9} {'score':>6}",
    ]
    for i, r in enumerate(shown, 1):
        tput = r.throughput.value if r.throughput else None
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
            f"{i:>3} {r.gpu:<{width}} {r.count:>4} {layout(r.layout):<14} "
            f"{r.required_bytes_per_gpu / GiB:>8.1f} {r.memory_utilization:>5.0%} "
            f"{num(tput, ',.0f'):>10} {middle} "
            f"{num(r.cost_usd, ',.2f'):>11} {price_cell(r):>16} {num(r.energy_kwh, ',.1f'):>9} "
            f"{score_cell(r.score):>6}{mark(r)}"
        )
    lines += more_line(len(shown), len(response.recommendations))
    lines += launch_lines(response.recommendations)
    lines += disaggregation_lines(response.recommendations)
    lines += advice_lines(response.advice)
    if response.hybrid is not None:
        lines.append(f"hybrid: {response.hybrid.detail}")
    lines += [f"warning: {w}" for w in response.warnings]
    return "\n".join(lines) + "\n"
