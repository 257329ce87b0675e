"""The recommendation's and the plan's answers stay byte for byte what was recorded
(tests/recommend_answers.py): the search's shortcuts (bounds, memos, pruning) are exact,
never an approximation that moves an answer."""

import pytest

from tests.recommend_answers import FILES, answers

RECORDED = sorted(p.name for p in FILES.glob("*.json"))


@pytest.fixture(scope="module")
def computed() -> dict[str, bytes]:
    return answers()


def test_every_recorded_answer_is_computed(computed: dict[str, bytes]) -> None:
    assert len(RECORDED) >= 40
    assert sorted(computed) == RECORDED


@pytest.mark.parametrize("name", RECORDED)
def test_the_answer_is_the_recorded_bytes(name: str, computed: dict[str, bytes]) -> None:
    recorded = (FILES / name).read_bytes()
    got = computed[name]
    if got != recorded:
        old, new = recorded.splitlines(), got.splitlines()
        differ = (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b)
        first = next(differ, min(len(old), len(new)))
        was = old[first] if first < len(old) else b"(end)"
        context = b"\n".join(new[max(0, first - 6) : first + 3]).decode()
        pytest.fail(
            f"{name} differs from line {first + 1} (recorded: {was!r}):\n{context}\n"
            "a shortcut of the search changed an answer (re-record with "
            "`python -m tests.recommend_answers` only for a deliberate change)"
        )
