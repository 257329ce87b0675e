"""Performance model: roofline speed, communication, cost and energy (pure functions).

``flops`` counts model FLOPs per token, ``speed`` turns them into step and serving
times on a GPU at an efficiency from ``efficiency`` (data, overridable), ``comm``
prices the collectives of a parallel layout over the catalog's links, and ``cost``
turns GPU-hours into dollars and kWh.
"""
