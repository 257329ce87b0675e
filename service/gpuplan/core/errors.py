"""gpuplan's one error family, and the one reader of msgspec's validation messages.

Every error gpuplan raises on purpose derives from :class:`GpuplanError`, so each
adapter maps the family once: the API to an RFC 9457 problem (``api/problems.py``), the
command line to a message and an exit code (``cli/errors.py``). Three branches:

- :class:`InvalidRequest`: a request's content is refused. The schema (msgspec) refuses
  what is malformed on its own terms; the core refuses what needs its knowledge (a
  tensor-parallel degree that does not divide the heads, a GPU the catalog does not
  know). Either way each offending field is named by its JSONPath, so the author of a
  plan file finds the line to fix.
- :class:`DataError`: a data file (built-in or the user's catalog, settings, a document)
  is invalid; the message names the file, the entry and the field.
- :class:`NotFound`: a name that no entry goes by (a GPU, a node), with the closest ones.
"""

import re
from collections.abc import Sequence
from typing import Literal

import msgspec

Location = Literal["body", "query", "path"]


class GpuplanError(Exception):
    """The root of gpuplan's own errors."""


class InvalidRequest(GpuplanError, ValueError):
    """A request is refused. ``errors`` pairs a JSONPath (``$.workload.parallelism.tensor``)
    with a reason, one pair per offending field.

    ``kind`` names the kind of problem (the API's problem ``type``), ``suggestions`` the
    closest known names for an unknown one, ``location`` the part of the request that
    holds the fields.
    """

    kind: str = "validation"

    def __init__(
        self,
        errors: Sequence[tuple[str, str]],
        *,
        kind: str | None = None,
        suggestions: Sequence[str] = (),
        location: Location = "body",
    ) -> None:
        self.errors = list(errors) or [("$", "invalid request")]
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in self.errors))
        if kind is not None:
            self.kind = kind
        self.suggestions = list(suggestions)
        self.location: Location = location

    @property
    def detail(self) -> str:
        """One line for a person: the first field, and how many more."""
        path, reason = self.errors[0]
        more = f" (and {len(self.errors) - 1} more)" if len(self.errors) > 1 else ""
        return f"invalid value at {path}: {reason}{more}"


class DataError(GpuplanError, ValueError):
    """A data file is invalid; the message names the file, the entry and the field."""


class NotFound(GpuplanError, LookupError):
    """No entry goes by ``query``; ``suggestions`` holds the closest names."""

    def __init__(self, query: str, suggestions: Sequence[str] = ()) -> None:
        super().__init__(query)
        self.query = query
        self.suggestions = list(suggestions)


# msgspec reports a validation error as "<reason> - at `$.a.b[0]`", or "<reason>" at the
# root. For a missing or unknown field it points at the object; the offending field is
# the one named in the reason, one level below.
_AT = re.compile(r"^(?P<reason>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)
_NAMED_FIELD = re.compile(r"^Object (?:missing required|contains unknown) field `(?P<name>[^`]+)`")


def field_error(exc: msgspec.ValidationError, root: str = "$") -> tuple[str, str]:
    """``(JSONPath, reason)`` of msgspec's validation error; paths start at ``root``."""
    match = _AT.match(str(exc))
    assert match is not None  # the pattern matches every string
    reason = match["reason"]
    path = match["path"] or "$"
    named = _NAMED_FIELD.match(reason)
    if named:
        path = f"{path}.{named['name']}"
    return root + path[1:], reason
