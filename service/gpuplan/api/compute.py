"""A time bound on the planning computations a request starts.

The core's functions are pure and synchronous; the request bounds in the schemas keep
each one finite, and this keeps each one *short*: it runs in a worker thread while
the event loop keeps serving probes and other requests, and when it has not finished
within ``GPUPLAN_PLANNING_TIMEOUT_SECONDS`` the client gets a 503 problem at once.
A Python thread cannot be killed, so a computation past its bound runs to its (finite)
end in the background and its answer is dropped; the thread pool's size caps how
many such stragglers there can be, and requests queued behind them time out too, so
the service sheds load instead of piling it up. The answer is encoded (and checked
for numbers JSON cannot carry, :mod:`gpuplan.api.answers`) inside the bound too.
"""

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

from litestar import Request

from gpuplan.api.answers import Encoded, encode_answer
from gpuplan.api.problems import ComputationTimeout
from gpuplan.api.runtime import runtime

T = TypeVar("T")


async def bounded(
    request: Request[Any, Any, Any], fn: Callable[..., T], *args: Any, inline: bool = False
) -> Encoded[T]:
    """``fn(*args)`` in a worker thread, within the planning time bound; its answer
    encoded by :func:`~gpuplan.api.answers.encode_answer`.

    ``inline`` runs it on the event loop instead, for a computation whose schema already
    bounds it to milliseconds: a worker thread's hop costs about 100 µs, more than such a
    computation itself. The bound still holds, checked when it returns: past it, the
    answer is dropped and the client gets the same 503.
    """
    seconds = runtime(request).settings.planning_timeout_seconds

    def run() -> Encoded[T]:
        return encode_answer(fn(*args))

    if inline:
        started = time.perf_counter()
        result = run()
        if time.perf_counter() - started > seconds:
            raise ComputationTimeout(seconds)
        return result
    try:
        async with asyncio.timeout(seconds):
            return await asyncio.to_thread(functools.partial(run))
    except TimeoutError:
        raise ComputationTimeout(seconds) from None
