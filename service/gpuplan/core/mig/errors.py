"""Errors the MIG planner raises for input it cannot plan; the API answers them 422."""

from collections.abc import Sequence
from typing import Literal

MigErrorKind = Literal["mig-unsupported", "unknown-profile", "validation"]


class MigInputError(ValueError):
    """A request names something the planner cannot use; ``path`` is its JSONPath."""

    def __init__(
        self,
        path: str,
        reason: str,
        kind: MigErrorKind = "validation",
        suggestions: Sequence[str] = (),
    ) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
        self.kind = kind
        self.suggestions = list(suggestions)
