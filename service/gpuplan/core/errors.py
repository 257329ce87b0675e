"""Errors the core raises about a request's content, each naming the offending field.

The schema (msgspec) refuses what is malformed on its own terms; these are the
refusals that need the core's knowledge: a tensor-parallel degree that does not
divide the heads, a config missing its hidden size, a GPU the catalog does not know.
Adapters turn them into a 422 problem (the API) or a message and exit code 2 (the
CLI), always with the JSONPath of each field, so the author of a plan file finds the
line to fix.
"""


class InvalidRequest(ValueError):
    """``errors`` pairs a JSONPath (``$.workload.parallelism.tensor``) with a reason."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in errors))
        self.errors = errors
