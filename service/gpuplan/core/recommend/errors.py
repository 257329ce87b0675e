"""Errors of the recommendation core that name the offending input field."""


class InvalidRecommendation(ValueError):
    """The request cannot be planned; ``errors`` pairs a JSONPath with a reason."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in errors))
        self.errors = errors
