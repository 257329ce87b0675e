"""A time bound on the planning computations a request starts.

The core's functions are pure and synchronous; the request bounds in the schemas keep
each one finite, and this keeps each one *short*: it runs in a worker thread while
the event loop keeps serving probes and other requests, and when it has not finished
within ``GPUPLAN_PLANNING_TIMEOUT_SECONDS`` the client gets a 503 problem at once.
A Python thread cannot be killed, so a computation past its bound runs to its (finite)
end in the background and its answer is dropped; the thread pool's size caps how
many such stragglers there can be, and requests queued behind them time out too, so
the service sheds load instead of piling it up.
"""

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from litestar import Request

from gpuplan.api.problems import ComputationTimeout
from gpuplan.api.runtime import runtime

T = TypeVar("T")


async def bounded(request: Request[Any, Any, Any], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread, within the planning time bound."""
    seconds = runtime(request).settings.planning_timeout_seconds
    try:
        async with asyncio.timeout(seconds):
            return await asyncio.to_thread(functools.partial(fn, *args))
    except TimeoutError:
        raise ComputationTimeout(seconds) from None
