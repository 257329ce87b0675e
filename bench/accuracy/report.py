"""Render the accuracy table of docs/accuracy.md from bench/results/accuracy.json.

python -m bench.accuracy.report
"""

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"
MiB = 1 << 20


def table() -> str:
    data = json.loads((RESULTS / "accuracy.json").read_text())
    traced_file = RESULTS / "accuracy_traced.json"
    traced = (
        {r["case"]: r["traced_bytes"] for r in json.loads(traced_file.read_text())["rows"]}
        if traced_file.exists()
        else {}
    )
    head = "| case | measured MiB | analytic MiB | error | peak phase (analytic) |"
    rule = "| --- | ---: | ---: | ---: | --- |"
    if traced:
        head = head.replace(" | peak phase", " | traced MiB | traced error | peak phase")
        rule = "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
    lines = [head, rule]
    for row in data["rows"]:
        cells = [
            row["case"],
            f"{row['measured_bytes'] / MiB:.2f}",
            f"{row['estimated_bytes'] / MiB:.2f}",
            f"{row['error']:+.2%}",
        ]
        if traced:
            t = traced.get(row["case"])
            cells += (
                [f"{t / MiB:.2f}", f"{(t - row['measured_bytes']) / row['measured_bytes']:+.2%}"]
                if t
                else ["", ""]
            )
        cells.append(row["phase"])
        lines.append("| " + " | ".join(cells) + " |")
    s = data["summary"]
    lines.append("")
    lines.append(
        f"{s['cases']} cases (torch {data['torch']}): median absolute error "
        f"{s['median_abs_error']:.2%}, worst {s['max_abs_error']:.2%}, "
        f"{s['within_10pct']} of {s['cases']} within 10%."
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(table(), end="")
