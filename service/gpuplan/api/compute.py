"""A time bound on the planning computations a request starts, and a size bound on
the numbers they answer.

The core's functions are pure and synchronous; the request bounds in the schemas keep
each one finite, and this keeps each one *short*: it runs in a worker thread while
the event loop keeps serving probes and other requests, and when it has not finished
within ``GPUPLAN_PLANNING_TIMEOUT_SECONDS`` the client gets a 503 problem at once.
A Python thread cannot be killed, so a computation past its bound runs to its (finite)
end in the background and its answer is dropped; the thread pool's size caps how
many such stragglers there can be, and requests queued behind them time out too, so
the service sheds load instead of piling it up.

Every integer of an answer must fit a JSON number that any client reads exactly
(2^53, JavaScript's safe integers; Go and Java overflow at 2^63), and every float must
be finite (JSON has no infinity; msgspec would write ``null``). A request that stays
within its field bounds can still multiply out past that (10^14 parameters on a
10^7-token sequence); it answers 422 instead of a number a client misreads.
"""

import asyncio
import functools
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from litestar import Request

from gpuplan.api.problems import ComputationTimeout, FieldError, InvalidInput
from gpuplan.api.runtime import runtime

T = TypeVar("T")

MAX_SAFE_INTEGER = 2**53 - 1


async def bounded(
    request: Request[Any, Any, Any], fn: Callable[..., T], *args: Any, inline: bool = False
) -> T:
    """``fn(*args)`` in a worker thread, within the planning time bound; its answer checked
    by :func:`check_representable`.

    ``inline`` runs it on the event loop instead, for a computation whose schema already
    bounds it to milliseconds: a worker thread's hop costs about 100 µs, more than such a
    computation itself. The bound still holds, checked when it returns: past it, the
    answer is dropped and the client gets the same 503.
    """
    seconds = runtime(request).settings.planning_timeout_seconds

    def run() -> T:
        result = fn(*args)
        check_representable(result)
        return result

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


def check_representable(result: Any) -> None:
    """Raise :class:`InvalidInput` (422) if an answer holds a number JSON cannot carry."""
    found = _first_unsafe(msgspec.to_builtins(result), "$")
    if found is not None:
        where, value = found
        reason = (
            f"the job is too large to plan: its answer {where} would be {value!r}, beyond what "
            "a JSON client reads exactly (2^53); check the model and workload sizes"
        )
        raise InvalidInput(422, "validation", reason, [FieldError(path="$", reason=reason)])


def _first_unsafe(value: Any, where: str) -> tuple[str, Any] | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            if abs(item) > MAX_SAFE_INTEGER:
                return path, item
        elif isinstance(item, float):
            if not math.isfinite(item) or abs(item) > 1e300:
                return path, item
        elif isinstance(item, dict):
            stack.extend((v, f"{path}.{k}") for k, v in item.items())
        elif isinstance(item, list):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return None
