"""Planning answers, encoded to JSON once, where they are computed.

A planning answer is a pure function of the request body and the process's catalog,
so the route encodes it where it is computed (in the worker thread, within the
planning time bound) and hands the framework bytes, not a Struct to encode again.

Every integer of an answer must fit a JSON number that any client reads exactly
(2^53, JavaScript's safe integers; Go and Java overflow at 2^63), and every float must
be finite (JSON has no infinity; msgspec would write ``null``). A request that stays
within its field bounds can still multiply out past that (10^14 parameters on a
10^7-token sequence); it answers 422 instead of a number a client misreads.

The bytes are what :class:`~gpuplan.api.answer_cache.AnswerCache` keeps.
"""

import math
from typing import Any, Generic, TypeVar

import msgspec

from gpuplan.core.errors import InvalidRequest

T = TypeVar("T")

MAX_SAFE_INTEGER = 2**53 - 1

# What could be unsafe in encoded JSON, screened with C-speed byte operations (a regular
# expression took 40 µs on a 1.3 KB estimate): ``null`` (msgspec's spelling of a
# non-finite float, or a real null), an exponent of three digits (|x| >= 1e100), or a
# run of 16 digits or more (2^53 has 16) that starts a number: after ``:``, ``,``,
# ``[``, a sign or at the document's start, never after a decimal point. An answer
# with none of them is safe; one with any gets the exact walk, which decides.
_DIGITS_TO_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 16
_INTEGER_STARTS = tuple(start + _LONG_RUN for start in (b":", b",", b"[", b"-"))


def _maybe_unsafe(data: bytes) -> bool:
    if b"null" in data:
        return True
    shape = data.translate(_DIGITS_TO_ZERO)
    return (
        b"e000" in shape
        or shape.startswith(_LONG_RUN)
        or any(start in shape for start in _INTEGER_STARTS)
    )


_encoder = msgspec.json.Encoder()


class Encoded(Generic[T]):
    """An answer of type ``T``, already encoded as JSON and checked representable.

    A route returning ``Encoded[X]`` is documented as returning ``X``
    (:func:`gpuplan.api.routing.operation` unwraps it).
    """

    __slots__ = ("json",)

    def __init__(self, json: bytes) -> None:
        self.json = json


def encode_answer(result: T) -> Encoded[T]:
    """``result`` as JSON; raise :class:`InvalidRequest` (422) if it holds a number JSON
    cannot carry exactly."""
    data = _encoder.encode(result)
    if _maybe_unsafe(data):
        check_representable(result)
    return Encoded(data)


def check_representable(result: Any) -> None:
    """Raise :class:`InvalidRequest` (422) if an answer holds a number JSON cannot carry."""
    found = _first_unsafe(msgspec.to_builtins(result), "$")
    if found is not None:
        where, value = found
        reason = (
            f"the job is too large to plan: its answer {where} would be {value!r}, beyond what "
            "a JSON client reads exactly (2^53); check the model and workload sizes"
        )
        raise InvalidRequest([("$", reason)])


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
