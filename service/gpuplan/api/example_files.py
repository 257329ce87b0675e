"""Reading the recorded examples (:mod:`gpuplan.api.examples`) of each operation.

An example is a request (``method``, ``path``, ``query``, ``body``) and the answer the
service gave it (``status``, ``body``), lists shortened to their first two items so
the document stays readable.
"""

import json
from functools import cache
from importlib import resources
from typing import Any

from gpuplan.core.record import Record

PACKAGE = "gpuplan.api.examples"
SHORT_LIST = 2
"""Items an example keeps of each list (the rest are left out, said in its summary)."""


class ExampleRequest(Record):
    method: str
    path: str
    query: dict[str, Any] = {}
    body: Any = None


class ExampleResponse(Record):
    status: int
    body: Any


class Example(Record):
    """A request an operation answered, and its answer."""

    summary: str
    request: ExampleRequest
    response: ExampleResponse


def shorten(value: Any) -> Any:
    """``value`` with every list cut to its first :data:`SHORT_LIST` items."""
    if isinstance(value, list):
        return [shorten(v) for v in value[:SHORT_LIST]]
    if isinstance(value, dict):
        return {k: shorten(v) for k, v in value.items()}
    return value


@cache
def examples() -> dict[str, Example]:
    """Each operation's example, by operationId."""
    import msgspec

    found = {}
    for entry in resources.files(PACKAGE).iterdir():
        if entry.name.endswith(".json"):
            found[entry.name.removesuffix(".json")] = msgspec.convert(
                json.loads(entry.read_text(encoding="utf-8")), Example
            )
    return dict(sorted(found.items()))
