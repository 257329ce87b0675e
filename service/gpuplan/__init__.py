"""gpuplan: answers the hardware questions of ML teams.

How much GPU memory does a job need, which GPUs (and how many) should run it, at what
time, cost and energy, and how should a MIG-capable GPU be partitioned. The planning
logic lives in :mod:`gpuplan.core` (pure functions over msgspec Structs); everything
else is an adapter around it.
"""

__version__ = "0.2.0"

__all__ = ["__version__"]
