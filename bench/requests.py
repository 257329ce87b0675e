"""The benchmarks' request sets, read from ``requests.toml`` (data kept apart from the
code that times it, so a request is added or changed in one place)."""

import tomllib
from functools import cache
from pathlib import Path
from typing import Any

FILE = Path(__file__).with_name("requests.toml")


@cache
def _sets() -> dict[str, Any]:
    with FILE.open("rb") as f:
        return tomllib.load(f)


def request_set(name: str) -> Any:
    """One benchmark's set: a table of named bodies, or a list of entries."""
    return _sets()[name]
