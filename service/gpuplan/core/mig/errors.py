"""Errors the MIG planner raises for input it cannot plan; the API answers them 422.

A :class:`MigInputError` is an :class:`~gpuplan.core.errors.InvalidRequest` of one field
that also says which kind of problem it is (its problem ``type``) and, for a name the
planner does not know, the closest names it does.
"""

from collections.abc import Sequence
from typing import Literal

from gpuplan.core.errors import InvalidRequest, Location

MigErrorKind = Literal["mig-unsupported", "unknown-profile", "validation"]


class MigInputError(InvalidRequest):
    """A request names something the planner cannot use; ``path`` is its JSONPath."""

    def __init__(
        self,
        path: str,
        reason: str,
        kind: MigErrorKind = "validation",
        suggestions: Sequence[str] = (),
        location: Location = "body",
    ) -> None:
        super().__init__([(path, reason)], kind=kind, suggestions=suggestions, location=location)
        self.path = path
        self.reason = reason
