"""The published real-GPU memory corpus is wide enough to judge the estimate by (issue 33:
at least 80 counted figures from at least 15 publications) and every case can be traced
back to what it quotes: a citation a reader can open, the exact quote, the measure and
the publication it belongs to.

Counted means what ``python -m bench.accuracy.intervals`` judges: not pending, not
excluded, and a peak, a reserve or a device figure (``FIGURE_OF``); vLLM's weights lines
check the weights alone and are not counted."""

import re
from collections import Counter
from typing import Any

from bench.accuracy.intervals import FIGURE_OF
from bench.accuracy.published import MEASURES, REGIMES, SOURCE_ID, cases

CITATION = re.compile(
    r"commit [0-9a-f]{40}"  # a repository file at a commit
    r"|(pull request|issue) #\d+"  # a GitHub thread
    r"|\bTable \d+"  # a paper's table
)


def _counted() -> list[dict[str, Any]]:
    return [
        c
        for c in cases()
        if not c.get("pending") and not c.get("excluded") and c["measure"] in FIGURE_OF
    ]


def test_the_corpus_reaches_issue_33s_counts() -> None:
    counted = _counted()
    sources = Counter(c["source_id"] for c in counted)
    assert len(counted) >= 80, len(counted)
    assert len(sources) >= 15, sorted(sources)


def test_no_publication_is_most_of_the_corpus() -> None:
    """Leave-one-source-out means little if one publication is most of the cases."""
    counted = _counted()
    largest = Counter(c["source_id"] for c in counted).most_common(1)[0][1]
    assert largest <= len(counted) // 4, largest


def test_every_case_has_a_citation_a_quote_a_measure_and_its_publication() -> None:
    for case in cases():
        name = case["id"]
        assert CITATION.search(case["source"]), f"{name}: no commit, thread or table"
        assert case["quote"].strip(), name
        assert case["measure"] in MEASURES, name
        assert SOURCE_ID.match(case["source_id"]), name
        assert case["regime"] in REGIMES, name
        assert case.get("notes") is not None, name


def test_the_counted_cases_cover_the_training_regimes_too() -> None:
    """Balanced across issue 33's regimes: not only inference."""
    regimes = Counter(c["regime"] for c in _counted())
    training = sum(n for r, n in regimes.items() if "inference" not in r)
    assert training >= len(_counted()) // 4, regimes
    assert {"megatron_3d", "lora", "fsdp2", "deepspeed_zero"} <= set(regimes), regimes
