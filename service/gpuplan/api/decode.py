"""Strict decoding of request bodies and query strings into Structs.

Our routes decode their own input instead of leaving it to the framework, for three
reasons a planner's callers notice: the checks are msgspec's strict ones (``"8"`` is
not a batch size), a duplicate key is refused rather than silently dropping one of
the two values, and every error carries the JSONPath of the offending field.
"""

import json
import re
from typing import Any, TypeVar, get_args, get_origin

import msgspec
from litestar import Request

from gpuplan.api.media import JSON_MEDIA_TYPE, is_json
from gpuplan.api.problems import MalformedBody, UnsupportedMediaType
from gpuplan.core.convert import convert
from gpuplan.core.errors import InvalidRequest, field_error

MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects a body may have. Our schemas need five levels
and a Hugging Face config a few more; deeper is an attack on a recursive reader."""

MAX_PATH_PARAMETER_LENGTH = 256
"""Longest path parameter (a GPU name, a node name: Kubernetes caps those at 253)."""

T = TypeVar("T")


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


# A JSON object key as it stands in the body: a string token followed by a colon. The
# scan never misses a real key (a real key's opening quote cannot close another token,
# since a key's text, not a colon, follows it); it may find extra tokens inside string
# values, which only sends the body down the exact path.
_KEY_TOKEN = re.compile(rb'"((?:[^"\\]|\\.)*)"\s*:')


def may_repeat_a_key(body: bytes) -> bool:
    """False when no key text occurs twice in ``body``: then no object repeats a key.

    The exact check parses the body again in Python (~20 µs for a small plan); most
    bodies name each key once, and this scan (~2 µs) proves it. Escaped keys
    (``"\u0061"`` is ``"a"``) compare equal only once decoded, so any backslash in a
    key sends the body to the exact check.
    """
    keys = _KEY_TOKEN.findall(body)
    return len(set(keys)) != len(keys) or any(b"\\" in key for key in keys)


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def decode_json(body: bytes, type_: type[T]) -> T:
    """Decode a JSON document into ``type_``: :class:`MalformedBody` if it is not one,
    :class:`~gpuplan.core.errors.InvalidRequest` if its content does not fit ``type_``."""
    _check_depth(body)
    try:
        value = msgspec.json.decode(body, type=type_)
    except msgspec.ValidationError:
        # The slow path of a refused body: every offending field, or the body as meant
        # (a whole number written 2e8). A typed decode stops at the first wrong type,
        # before it sees the rest: the body may still not be JSON.
        try:
            document = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise MalformedBody(f"request body is not valid JSON: {exc}") from None
        except RecursionError:
            raise MalformedBody("request body is nested too deeply") from None
        value = convert(document, type_)
    except msgspec.DecodeError as exc:
        if not body.strip():
            raise MalformedBody("request body is empty; a JSON object is required") from None
        raise MalformedBody(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise MalformedBody("request body is nested too deeply") from None
    # msgspec keeps the last of two equal keys; a planner must not guess which one the
    # author meant. The body is valid JSON by now, so only the duplicate check can fail.
    if not may_repeat_a_key(body):
        return value
    try:
        json.loads(body, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as dup:
        raise MalformedBody(
            f"request body repeats the key {dup.key!r} in one object",
            kind="duplicate-key",
            repeated_key=dup.key,
        ) from None
    except RecursionError:
        raise MalformedBody("request body is nested too deeply") from None
    return value


def _check_depth(body: bytes) -> None:
    """Refuse a body nested deeper than :data:`MAX_JSON_DEPTH` before anything parses it.

    No recursion and no Python loop over the bytes: escapes and strings are dropped,
    then everything but brackets, and each pass deletes the innermost ``[]``/``{}``
    pairs; a body still holding brackets after ``MAX_JSON_DEPTH`` passes nests deeper.
    Unbalanced brackets stop the passes early and are left to the parser to report.
    """
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return  # too few brackets to nest that deep: most bodies stop here (< 1 µs)
    # Escaped backslashes first, so that in ``\\"`` the quote still ends its string.
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    structure = b"".join(plain.split(b'"')[::2]).translate(None, _NOT_BRACKETS)
    for _ in range(MAX_JSON_DEPTH):
        reduced = structure.replace(b"[]", b"").replace(b"{}", b"")
        if reduced == structure:
            return
        structure = reduced
    if structure.replace(b"[]", b"").replace(b"{}", b"") != structure:
        raise MalformedBody(f"request body is nested deeper than {MAX_JSON_DEPTH} levels")


_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")


async def read_body(request: Request[Any, Any, Any]) -> bytes:
    """A request's JSON body, undecoded (size limit enforced by the app); 415 if the
    content type is not JSON."""
    if not is_json(request.content_type[0].lower()):
        raise UnsupportedMediaType(request.headers.get("content-type", ""), JSON_MEDIA_TYPE)
    return await request.body()


def _is_sequence(annotation: Any) -> bool:
    for candidate in (annotation, *get_args(annotation)):
        origin = get_origin(candidate)
        if origin in (list, tuple, set, frozenset):
            return True
    return False


def decode_query(request: Request[Any, Any, Any], type_: type[T]) -> T:
    """Decode a query string into a Struct: repeated keys feed list fields."""
    params = request.query_params
    raw: dict[str, Any] = {}
    fields = {f.encode_name: f for f in msgspec.structs.fields(type_)}  # type: ignore[arg-type]
    for key in params:
        field = fields.get(key)
        if field is not None and _is_sequence(field.type):
            raw[key] = params.getall(key)
            continue
        values = params.getall(key)
        if len(values) > 1:
            reason = f"given {len(values)} times; the query parameter takes one value"
            raise InvalidRequest([(f"$.{key}", reason)], location="query")
        raw[key] = values[0]
    try:
        return msgspec.convert(raw, type_, strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidRequest([field_error(exc)], location="query") from None


def check_path_parameters(params: dict[str, Any]) -> None:
    """Refuse a path parameter longer than :data:`MAX_PATH_PARAMETER_LENGTH`: 422 naming it."""
    for name, value in params.items():
        if isinstance(value, str) and len(value) > MAX_PATH_PARAMETER_LENGTH:
            reason = f"longer than {MAX_PATH_PARAMETER_LENGTH} characters"
            raise InvalidRequest([(f"$.{name}", reason)], location="path")
