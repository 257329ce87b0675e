"""Encoded planning answers, remembered by the request body that asked for them.

CI pipelines and schedulers send the same request again and again (the same plan on
every commit, the same MIG layout question every minute). A planning answer is a pure
function of its body and the process's catalog, which is fixed for the life of the
process, so a repeated body can be answered with the bytes sent last time.

The routes store their answers (:func:`gpuplan.api.routing.operation`); an ASGI layer
in front of the framework (:func:`serve_repeats`) serves repeats, so a repeat
costs reading the body and one lookup: no routing, no decoding, no computing, no
encoding. It sits inside the authentication and metrics layers, which see every
request alike.
"""

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gpuplan.api.media import is_json

ASGIApp = Any  # an ASGI callable; Litestar's types are too narrow for a wrapper
Message = dict[str, Any]


class AnswerCache:
    """Encoded answers by (route, request body), least recently used out first.

    Bounded in bytes (keys and answers both count), since one recommendation answer
    is tens of KB and one body up to ``GPUPLAN_MAX_BODY_BYTES``; an entry larger than
    a sixteenth of the budget is not kept, so no single request can empty the cache.
    Used from the event loop only, so it needs no lock.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[tuple[str, bytes], bytes] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: tuple[str, bytes]) -> bool:
        """Whether ``(route, body)`` is kept, without counting as a use."""
        return key in self._entries

    def get(self, route: str, body: bytes) -> bytes | None:
        answer = self._entries.get((route, body))
        if answer is not None:
            self._entries.move_to_end((route, body))
        return answer

    def put(self, route: str, body: bytes, answer: bytes) -> None:
        size = _size(route, body, answer)
        if size > self.max_bytes // 16 or (route, body) in self._entries:
            return
        self._entries[(route, body)] = answer
        self.bytes += size
        while self.bytes > self.max_bytes:
            (old_route, old_body), old_answer = self._entries.popitem(last=False)
            self.bytes -= _size(old_route, old_body, old_answer)


# What an entry costs beyond its bytes, rounded up: the key tuple and the ordered dict's
# slot and link (130 bytes measured with tracemalloc, CPython 3.11) and the two bytes
# objects' headers (33 bytes each).
_ENTRY_OVERHEAD_BYTES = 256


def _size(route: str, body: bytes, answer: bytes) -> int:
    return _ENTRY_OVERHEAD_BYTES + len(route) + len(body) + len(answer)


def serve_repeats(
    cache: AnswerCache,
    app: ASGIApp,
    routes: Iterable[str],
    max_body_bytes: int,
    looked_up: Callable[[str, str], None],
) -> ASGIApp:
    """Wrap ``app`` so that a JSON ``POST`` to one of ``routes`` (paths without
    parameters) whose body ``cache`` holds is answered from it.

    Anything else goes on to ``app`` untouched: other methods and paths, a query
    string, a content type that is not JSON (the framework answers 415), an
    ``Origin`` header (the framework adds the CORS headers), ``Cache-Control:
    no-cache`` (the client asks for a fresh computation, RFC 9111 5.2.1.4), a body
    over ``max_body_bytes`` or a client gone mid-body (the framework answers those).
    A body read and not found is replayed to ``app``. ``looked_up(route, "hit" |
    "miss")`` counts each lookup.
    """
    remembered = frozenset(routes)

    async def answer_repeats(scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path")
        if (
            path not in remembered
            or scope["type"] != "http"
            or scope["method"] != "POST"
            or scope.get("query_string")
            or not _servable(scope["headers"])
        ):
            await app(scope, receive, send)
            return
        messages, body = await _read_body(receive, max_body_bytes)
        answer = None if body is None else cache.get(path, body)
        if body is not None:
            looked_up(path, "miss" if answer is None else "hit")
        if answer is None:
            await app(scope, _replay(messages, receive), send)
            return
        scope["path_template"] = path  # what the router would have set, for the metrics
        headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})

    return answer_repeats


def _servable(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """A JSON content type, no ``Origin`` (a browser's request gets CORS headers) and
    no ``Cache-Control: no-cache``."""
    json = False
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"origin":
            return False
        if lowered == b"cache-control" and b"no-cache" in value.lower():
            return False
        if lowered == b"content-type":
            json = is_json(value.split(b";", 1)[0].strip().lower().decode("latin-1"))
    return json


async def _read_body(
    receive: Callable[[], Awaitable[Message]], max_bytes: int
) -> tuple[list[Message], bytes | None]:
    """The messages received and the whole body, or ``None`` for the body when it is
    over ``max_bytes`` or the client left before its end."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > max_bytes:
            return messages, None
        if not message.get("more_body", False):
            break
    return messages, b"".join(m.get("body", b"") for m in messages)


def _replay(
    messages: list[Message], receive: Callable[[], Awaitable[Message]]
) -> Callable[[], Awaitable[Message]]:
    """A ``receive`` that gives ``messages`` again, then what ``receive`` gives."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
