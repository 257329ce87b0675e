"""Errors of the plan core: a plan file the core cannot check, naming the field."""

from gpuplan.core.errors import InvalidRequest


class InvalidCiPlan(InvalidRequest):
    """The plan cannot be computed (see :class:`InvalidRequest`); the API answers 422."""
