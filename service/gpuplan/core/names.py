"""Closest names: the one "did you mean" of the core, for GPUs, presets and MIG profiles.

People type the names their tools print, not ours: ``Qwen2.5-72B-Instruct`` from the
Hugging Face Hub, ``meta-llama/Llama-3.1-8B``, ``llama-3-8b`` from memory, ``rtx4080``
for a card the catalog lacks, ``h100`` for a family. A refusal that lists every known
name makes them search it; one that names the one or two they most likely meant lets
them retype. Every refusal of a name (the API's 404 and 422 problems, whose
``suggestions`` these are, and the command line's messages) ranks candidates here, so
the API and the CLI suggest the same names.

How names are compared: both sides are *folded* (lower case, letters and digits only;
for model names also without an organisation prefix ``org/`` and without the suffixes
that name a variant of the same weights, ``-Instruct``, ``-chat``, ``-hf``, ``-it``,
``-v0.2``), then compared with :class:`difflib.SequenceMatcher`'s ratio, the whole name
and its beginning alike, so a family (``h100``, ``yolov5``) or a name with something
appended (``h2000``) still finds what it begins with. Only names about as close as the
best one are kept: ``llama-3-8b`` gets ``llama-3.1-8b`` alone, not every Llama.
"""

import difflib
import re
from collections.abc import Callable, Iterable

LIMIT = 3
"""Most names suggested."""

CUTOFF = 0.6
"""Least similarity (0..1) of a name worth suggesting."""

MARGIN = 0.1
"""Names this much less similar than the best one are left out."""

PREFIX_CUTOFF = 0.75
"""Least similarity of a name's beginning to count as the name's."""

_VARIANT_SUFFIX = re.compile(r"([^a-z0-9]+(instruct|chat|hf|it|v\d+([^a-z0-9]\d+)*))+$")


def fold_name(name: str) -> str:
    """A model name as compared: without an ``org/`` prefix or a variant suffix
    (``-Instruct``, ``-chat``, ``-hf``, ``-it``, ``-v0.2``), letters and digits only."""
    lowered = name.strip().lower().rsplit("/", 1)[-1]
    return re.sub(r"[^a-z0-9]", "", _VARIANT_SUFFIX.sub("", lowered))


def _similarity(query: str, key: str) -> tuple[float, float]:
    """How well ``query`` names ``key``: the best of the whole-name ratio, the query
    against the key's beginning (a family: ``h100``) and the key against the query's
    (something appended: ``h2000``), then the whole-name ratio to break ties."""
    whole = difflib.SequenceMatcher(None, query, key).ratio()
    heads = []
    if len(query) >= 2:
        heads.append(difflib.SequenceMatcher(None, query, key[: len(query)]).ratio())
    if len(key) >= 4:
        heads.append(difflib.SequenceMatcher(None, query[: len(key)], key).ratio())
    # A beginning counts when it is nearly the same (one slip in four to eight letters):
    # a loose one ranks `rtx3050` for `rtx6000ada` on their shared `rtx`.
    return max([whole, *(h for h in heads if h >= PREFIX_CUTOFF)]), whole


def closest(
    query: str,
    names: Iterable[tuple[str, str]],
    *,
    fold: Callable[[str], str] = fold_name,
    limit: int = LIMIT,
) -> list[str]:
    """The suggestions ``query`` most likely means, best first, at most ``limit``.

    ``names`` pairs each name something goes by with what to suggest for it (a GPU's
    aliases each with its id), so the closest alias suggests its id once. A name equal
    to the query after folding wins alone.
    """
    q = fold(query)
    if not q:
        return []
    scores: dict[str, tuple[float, float, float]] = {}
    for name, suggestion in names:
        key = fold(name)
        if not key:
            continue
        best, whole = _similarity(q, key)
        canonical = difflib.SequenceMatcher(None, q, fold(suggestion)).ratio()
        score = (2.0 if key == q else best, whole, canonical)
        if score > scores.get(suggestion, (-1.0, -1.0, -1.0)):
            scores[suggestion] = score
    if not scores:
        return []
    ranked = sorted(scores.items(), key=lambda item: (tuple(-s for s in item[1]), item[0]))
    top = ranked[0][1][0]
    if top >= 2.0:
        return [s for s, score in ranked if score[0] >= 2.0][:limit]
    return [s for s, score in ranked if score[0] >= max(CUTOFF, top - MARGIN)][:limit]


def did_you_mean(suggestions: Iterable[str]) -> str:
    """``; did you mean a, b or c?``, or nothing without suggestions."""
    names = list(suggestions)
    if not names:
        return ""
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f"; did you mean {listed}?"
