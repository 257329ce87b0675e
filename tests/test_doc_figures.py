"""The docs say what the results and the service say: every marked figure of README.md
and docs/*.md is what bench/quote.py writes from bench/results (or from the core's
answer), and docs/ci.md's examples describe the layouts `gpuplan plan` answers."""

import re
from pathlib import Path

import pytest
from bench import quote

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES_TABLE = re.compile(
    r"^\| \[(?P<file>[\w.-]+\.yaml)\]\(\.\./examples/(?P=file)\) \| (?P<scenario>[^|]+) \| (?P<answer>.+) \|$",
    re.M,
)


def test_every_marked_figure_is_what_the_results_say() -> None:
    problems = quote.stale()
    assert not problems, "\n".join(problems)


def test_the_docs_mark_their_figures() -> None:
    # the mechanism is in use where the issue found drift (not an empty check)
    marked = {
        path.name: {m["name"] for m in quote.SPAN.finditer(path.read_text(encoding="utf-8"))}
        for path in quote.docs()
    }
    assert {"speed_cv.summary:training", "estimate.range", "mig.suite"} <= marked["README.md"]
    assert "suite.table" in marked["benchmarks.md"]
    assert "answer.serving_example" in marked["recommendation.md"]
    assert "mig.times" in marked["mig.md"]


def test_every_figure_is_quoted_somewhere() -> None:
    unused = set(quote.FIGURES) - quote.quoted()
    assert not unused, f"bench/quote.py writes figures no doc quotes: {sorted(unused)}"


def test_a_stale_span_is_named_with_both_texts() -> None:
    text = "The grid: <!-- figure: accuracy.cases -->76<!-- /figure --> steps.\n"
    (problem,) = quote.problems(text, "docs/x.md")
    expected = quote.render("accuracy.cases")
    assert problem.startswith("docs/x.md:1: figure 'accuracy.cases' says")
    assert "'76'" in problem
    assert repr(expected) in problem
    assert list(quote.problems(quote.rewrite(text), "docs/x.md")) == []


def test_an_unknown_figure_fails() -> None:
    text = "Speed: <!-- figure: estimate.rnage -->1 µs<!-- /figure -->.\n"
    (problem,) = quote.problems(text, "README.md")
    assert "'estimate.rnage' is unknown" in problem
    assert "estimate.range" in problem  # the closest name


def test_a_span_opening_a_line_fails() -> None:
    # Markdown reads a line that opens with an HTML comment as a raw HTML block
    current = quote.FIGURES["accuracy.cases"]()
    text = f"Median\n  <!-- figure: accuracy.cases -->{current}<!-- /figure --> steps.\n"
    (problem,) = quote.problems(text, "docs/x.md")
    assert "opens a line" in problem


def test_a_marker_in_inline_code_is_an_example() -> None:
    text = "a span (`<!-- figure: name -->`…`<!-- /figure -->`)\n"
    assert list(quote.problems(text, "docs/x.md")) == []


LAYOUT_WORDS: dict[str, re.Pattern[str]] = {
    "ZeRO-3": re.compile(r"z3$"),
    "FSDP": re.compile(r"z3$"),
    "ZeRO-2": re.compile(r"z2$"),
    "tensor parallel": re.compile(r"^t[2-9]\d*"),
    "pipeline": re.compile(r"p[2-9]\d*d"),
}
"""What a layout named in a scenario's words must show in the `fits` verdict's layout
code (``t{tensor}p{pipeline}d{data}z{zero stage}``)."""


def _examples_table() -> list[re.Match[str]]:
    text = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
    return list(EXAMPLES_TABLE.finditer(text))


def test_the_examples_table_lists_every_example() -> None:
    listed = {row["file"] for row in _examples_table()}
    assert listed == {p.name for p in (ROOT / "examples").glob("*.yaml")}


@pytest.mark.parametrize("row", _examples_table(), ids=lambda row: row["file"])
def test_an_example_is_described_as_gpuplan_plans_it(row: re.Match[str]) -> None:
    report, _ = quote._plan(row["file"])
    fits = next(v for v in report.verdicts if v.target == "fits")
    assert fits.layout is not None
    scenario = row["scenario"]
    for words, layout in LAYOUT_WORDS.items():
        if words in scenario:
            assert layout.search(fits.layout), (
                f"docs/ci.md says {row['file']} runs {words!r} ({scenario.strip()!r}), "
                f"but its fits verdict is {fits.count} x {fits.gpu} at {fits.layout}"
            )
    count = re.search(r"\b(\d+) x [A-Z]", scenario)
    one = re.search(r"\b(one|an) (RTX|A\d|H\d|L\d)", scenario)
    if count:
        assert fits.count == int(count[1]), (row["file"], scenario, fits.count)
    elif one:
        assert fits.count == 1, (row["file"], scenario, fits.count)
    assert f"<!-- figure: answer.ci_example:{row['file']} -->" in row["answer"]
