"""Errors of the recommendation core that name the offending input field."""

from gpuplan.core.errors import InvalidRequest


class InvalidRecommendation(InvalidRequest):
    """The request cannot be planned (see :class:`~gpuplan.core.errors.InvalidRequest`)."""
