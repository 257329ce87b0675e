"""How well the usable-memory model reproduces the MIG captures (docs/mig.md quotes it).

    PYTHONPATH=service:. python -m bench.mig.mig_usable

For every captured table and memory fraction: the captured usable memory, the model fitted
on all captures (in sample) and the model fitted without that table (leave one out), with
the errors. Pure arithmetic on the shipped data; tests/test_mig_usable.py pins the summary.
"""

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.mig import builtin_tables, usable

GiB = 2**30


def main() -> None:
    catalog = builtin_catalog()
    tables = builtin_tables()
    totals = {t.id: min(catalog.get(g).usable_memory_bytes for g in t.gpus) for t in tables}
    points = usable.captures(tables, totals)
    distinct = list({(c.table, c.fraction): c for c in points}.values())
    shares = usable.fit(points)
    held = {(h.capture.table, h.capture.fraction): h for h in usable.leave_one_out(distinct)}
    print("| table | fraction | captured GiB | model GiB | left out GiB | left-out error |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c in sorted(distinct, key=lambda c: (c.table, c.fraction)):
        fit_all = usable.predict(c.fraction, c.total_bytes, shares)
        h = held[(c.table, c.fraction)]
        print(
            f"| {c.table} | {c.fraction} | {c.usable_bytes / GiB:.3f} | {fit_all / GiB:.3f} "
            f"| {h.predicted_bytes / GiB:.3f} | {h.error * 100:+.2f}% |"
        )
    errors = [h.error for h in held.values()]
    print()
    print(
        f"shares: {', '.join(f'{f}: {float(s):.3f}' for f, s in sorted(shares.items()))}; "
        f"{len(points)} captured profiles, {len(distinct)} distinct points; leave one out: "
        f"mean |error| {sum(abs(e) for e in errors) / len(errors) * 100:.1f}%, "
        f"worst {min(errors) * 100:+.1f}% / {max(errors) * 100:+.2f}%"
    )


if __name__ == "__main__":
    main()
