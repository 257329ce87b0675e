"""Errors of the memory core that name the offending input field."""

from gpuplan.core.errors import InvalidRequest


class InvalidModel(InvalidRequest):
    """The model or workload description cannot be used (see :class:`InvalidRequest`)."""
