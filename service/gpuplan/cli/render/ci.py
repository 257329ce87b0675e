"""Plan reports as text: a pull-request comment (Markdown) and a terminal table.

Pure functions of a :class:`CiReport`, so a report computed locally and one
fetched from ``POST /v1/plan`` render to the same bytes. The Markdown puts what a
reviewer needs first: the verdicts, then a compact table of the top plans, then the
advice; the MIG fits and assumptions fold away under ``<details>``.
"""

from collections.abc import Sequence

from gpuplan.cli.render.candidates import (
    advice_lines,
    basis_line,
    launch_lines,
    layout,
    mark,
    price_cell,
    score_cell,
)
from gpuplan.cli.render.output import GiB, num
from gpuplan.core.ci import CiReport
from gpuplan.core.ci.schema import MigFit
from gpuplan.core.recommend.schema import Candidate

MARK = {"pass": "✅", "fail": "❌"}
DASH = "–"
BAR = 40
"""Characters of the widest memory bar."""


def _num(value: float | None, fmt: str) -> str:
    return num(value, fmt, DASH)


def _cells(r: Candidate) -> tuple[str, str, str, str, str, str, str]:
    """A recommendation's layout, GiB per GPU, memory use, hours, USD, price per GPU-hour
    and score, formatted once for both tables (each pads them its own way)."""
    return (
        layout(r.layout, DASH),
        f"{r.required_bytes_per_gpu / GiB:.1f}",
        f"{r.memory_utilization:.0%}",
        _num(r.time_hours, ",.2f"),
        _num(r.cost_usd, ",.2f"),
        price_cell(r, DASH),
        score_cell(r.score, DASH),
    )


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _bar(parts: Sequence[tuple[str, float]], scale: float) -> str:
    """The parts as runs of their characters, ``BAR`` wide at ``scale`` bytes, padded."""
    out, at = "", 0.0
    for char, nbytes in parts:
        start = round(at / scale * BAR)
        at += max(nbytes, 0.0)
        out += char * (round(at / scale * BAR) - start)
    return out.ljust(BAR)


def memory_bars(report: CiReport) -> list[str]:
    """Bars of the memory on one GPU and, with a ``fits`` target, on its GPU against the
    usable memory, plus the headroom line: inline code, so GitHub draws them in a fixed
    font and they read the same as plain text."""
    e = report.estimate
    fits = next((v for v in report.verdicts if v.target == "fits" and v.unit == "bytes"), None)
    sizes: list[float] = [e.required_bytes]
    if fits is not None:
        sizes += [x for x in (fits.actual, fits.limit) if x is not None]
    scale = max(sizes)
    one = [
        ("█", e.peak_bytes),
        ("▒", e.total_bytes - e.peak_bytes),
        ("░", e.required_bytes - e.total_bytes),
    ]
    rows: list[tuple[str, float, str]] = [
        (_bar(one, scale), e.required_bytes, "one GPU as written")
    ]
    headroom = []
    if fits is not None and fits.limit is not None:
        if fits.actual is not None:
            rows.append(
                (
                    _bar([("█", fits.actual)], scale),
                    fits.actual,
                    f"per GPU on {fits.count} x `{fits.gpu}`",
                )
            )
            spare = fits.limit - fits.actual
            headroom = [
                "",
                f"Headroom on {fits.count} x `{fits.gpu}`: **{spare / GiB:+.2f} GiB** "
                f"(needs {fits.actual / fits.limit:.0%} of the {fits.limit / GiB:.2f} GiB usable).",
            ]
        usable = _bar([("─", fits.limit)], scale).rstrip()
        rows.append((f"{usable[:-1]}┤".ljust(BAR), fits.limit, f"usable on `{fits.gpu}`"))
    return [
        "",
        *(f"- `{bar}` {nbytes / GiB:,.2f} GiB {label}" for bar, nbytes, label in rows),
        "",
        "<sub>█ peak · ▒ framework overhead · ░ headroom to the 95% high end · ─┤ usable memory</sub>",
        *headroom,
    ]


def _gib(nbytes: int | None) -> str:
    return _num(None if nbytes is None else nbytes / GiB, ".2f")


def _mig_split(report: CiReport) -> tuple[list[MigFit], list[MigFit]]:
    """The MIG GPUs with a profile that holds the job, and those without one: a report
    lists the first and counts the second (21 lines of "none holds it" hid the few that
    answer)."""
    holding = [m for m in report.mig if m.profile is not None]
    return holding, [m for m in report.mig if m.profile is None]


def _mig_none(holding: Sequence[MigFit], none: Sequence[MigFit]) -> str:
    """One sentence for the MIG GPUs where no profile holds the job, with what it needs
    (the least of them: the overheads differ a little by GPU)."""
    need = min(m.required_bytes for m in none) / GiB
    n = len(none)
    gpus = f"{n} MIG GPU{'s' if n != 1 else ''}"
    other = "" if not holding else "other "
    return f"no profile of the {other}{gpus} holds the job (it needs at least {need:.2f} GiB)"


def markdown(report: CiReport) -> str:
    failed = [v for v in report.verdicts if v.status == "fail"]
    n = len(report.verdicts)
    head = (
        f"all {n} target{'s' if n != 1 else ''} pass"
        if not failed
        else f"{len(failed)} of {n} target{'s' if n != 1 else ''} fail"
    )
    e = report.estimate
    lines = [
        f"### {MARK['fail' if failed else 'pass']} gpuplan: {head}",
        "",
        "| | target | verdict |",
        "| --- | --- | --- |",
    ]
    lines += [f"| {MARK[v.status]} | `{v.target}` | {_cell(v.reason)} |" for v in report.verdicts]
    lines += [
        "",
        f"Memory on one GPU as written: peak **{e.peak_bytes / GiB:.2f} GiB**, reserved "
        f"{e.reserved_bytes / GiB:.2f} GiB, on the device {e.device_bytes / GiB:.2f} GiB, required (95% high end, +{e.headroom_fraction:.0%}) **{e.required_bytes / GiB:.2f} GiB**; "
        f"scenario `{report.scenario.class_}` ({report.scenario.band}).",
        *memory_bars(report),
        "",
        _cell(basis_line(report.price_basis)) + ".",
        "",
        "| # | GPU | count | layout | GiB/GPU | mem | hours | USD | USD/GPU-h | score |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for i, r in enumerate(report.recommendations, 1):
        lines.append(f"| {i} | `{r.gpu}`{mark(r)} | {r.count} | " + " | ".join(_cells(r)) + " |")
    launch = launch_lines(report.recommendations)
    if launch:
        lines += ["", f"**{_cell(launch[0])}**", "", "```sh", launch[1].strip(), "```"]
        lines += [f"- {_cell(n.strip())}" for n in launch[2:]]
    if report.advice:
        lines += ["", "**Advice**", ""]
        for a in report.advice:
            verdict = "fits" if a.fits_after else "still too big"
            factor = f", time ×{a.time_factor:.2f}" if a.time_factor is not None else ""
            lines.append(
                f"- `{a.gpu}` ×{a.count}: **{a.change}**: {a.required_bytes_before / GiB:.1f} → "
                f"{a.required_bytes_after / GiB:.1f} GiB, {verdict}{factor}. {_cell(a.detail)}"
            )
    if report.hybrid is not None:
        lines += ["", f"**Hybrid**: {_cell(report.hybrid.detail)}"]
    for w in report.warnings:
        lines += ["", f"> ⚠️ {_cell(w)}"]
    holding, none = _mig_split(report)
    lines += [
        "",
        f"<details><summary>MIG: smallest instance holding the job ({len(holding)} of "
        f"{len(report.mig)} MIG GPUs)</summary>",
        "",
    ]
    if holding:
        lines += [
            "| GPU | profile | Kubernetes resource | usable GiB | use |",
            "| --- | --- | --- | ---: | ---: |",
        ]
    for m in holding:
        shaky = " (unverified)" if m.unverified else ""
        lines.append(
            f"| `{m.gpu}` | {m.profile}{shaky} | `{m.resource}` | {_gib(m.memory_bytes)} | "
            f"{_num(m.utilization, '.0%')} |"
        )
    if none:
        lines += ["", _mig_none(holding, none)]
    lines += ["", "</details>", ""]
    lines += ["<details><summary>Assumptions</summary>", ""]
    lines += [f"- {_cell(a)}" for a in report.assumptions]
    lines += [f"- unverified: {_cell(u)}" for u in report.unverified]
    lines += ["", "</details>", "", f"<sub>plan `{report.plan_id}` · gpuplan</sub>", ""]
    return "\n".join(lines)


def table(report: CiReport) -> str:
    out = []
    for v in report.verdicts:
        out.append(f"{v.status.upper():<4}  {v.target:<20} {v.reason}")
    out.append(f"{'PASS' if report.passed else 'FAIL'}  plan {report.plan_id}")
    e = report.estimate
    out.append(
        f"memory (one GPU as written): peak {e.peak_bytes / GiB:.2f} GiB, required "
        f"{e.required_bytes / GiB:.2f} GiB; scenario {report.scenario.class_}"
    )
    out.append(basis_line(report.price_basis))
    width = max([len("gpu"), *(len(r.gpu) for r in report.recommendations)])
    out.append(
        f"{'#':>3} {'gpu':<{width}} {'n':>4} {'layout':<10} {'GiB/GPU':>8} {'mem%':>5} "
        f"{'hours':>10} {'USD':>12} {'USD/GPU-h':>16} {'score':>6}"
    )
    for i, r in enumerate(report.recommendations, 1):
        lay, gib, mem, hours, usd, price, score = _cells(r)
        out.append(
            f"{i:>3} {r.gpu:<{width}} {r.count:>4} {lay:<10} {gib:>8} {mem:>5} {hours:>10} "
            f"{usd:>12} {price:>16} {score:>6}{mark(r)}"
        )
    holding, none = _mig_split(report)
    if holding:
        out.append(
            f"mig  smallest MIG instance holding the job, on {len(holding)} of "
            f"{len(report.mig)} MIG GPUs:"
        )
    width = max([0, *(len(m.gpu) for m in holding)])
    for m in holding:
        shaky = ", unverified" if m.unverified else ""
        out.append(
            f"mig  {m.gpu:<{width}}  {m.profile} ({m.resource}), {_gib(m.memory_bytes)} GiB "
            f"usable, {_num(m.utilization, '.0%')} used{shaky}"
        )
    if none:
        out.append(f"mig  {_mig_none(holding, none)}")
    out += launch_lines(report.recommendations)
    out += advice_lines(report.advice)
    if report.hybrid is not None:
        out.append(f"hybrid: {report.hybrid.detail}")
    out += [f"warning: {w}" for w in report.warnings]
    return "\n".join(out) + "\n"
