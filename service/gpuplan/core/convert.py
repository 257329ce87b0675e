"""A user's document into a request Struct, refusing it with every offending field named.

msgspec stops at the first error, which is the right speed for a valid document and the
wrong help for a plan file with three mistakes: its author fixes one, runs CI again, and
meets the next. When the fast conversion fails, a second pass walks the document along
the Struct's fields and reports each field that fails on its own, with the closest
field name for an unknown key (``fit`` → ``fits``).

One leniency, where no meaning is lost: a number written with an exponent (``2e8``
tokens) is a float to JSON and YAML, and an integer field takes it when it is a whole
number, as the reader meant.
"""

import difflib
import math
import types
import typing
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec

from gpuplan.core.errors import InvalidRequest, field_error

T = TypeVar("T")

_MAX_EXACT_FLOAT = 2.0**53
"""Whole floats up to here convert to the integer they denote, and none beyond: a float
past 2^53 may already have lost the digits its author wrote."""


def convert(document: Any, type_: type[T], *, strict: bool = True) -> T:
    """``document`` as ``type_``, or :class:`InvalidRequest` naming every bad field."""
    try:
        return msgspec.convert(document, type_, strict=strict)
    except msgspec.ValidationError as exc:
        first = field_error(exc)
    whole = _whole_numbers(document, type_)
    if whole is not document:
        try:
            return msgspec.convert(whole, type_, strict=strict)
        except msgspec.ValidationError as exc:
            first = field_error(exc)
    errors = _errors(whole, type_, "$", strict) or [first]
    raise InvalidRequest(_with_first(errors, first))


def _with_first(errors: list[tuple[str, str]], first: tuple[str, str]) -> list[tuple[str, str]]:
    """``errors`` in document order, without duplicates; msgspec's own (``first``) kept
    when the walk found another wording for that path."""
    seen: dict[str, str] = {}
    for path, reason in errors:
        seen.setdefault(path, reason)
    if first[0] not in seen and not any(first[0].startswith(p) for p in seen):
        seen[first[0]] = first[1]
    return list(seen.items())


def _bare(annotation: Any) -> Any:
    """``annotation`` without ``Annotated`` metadata."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation


def _options(annotation: Any) -> tuple[Any, ...]:
    """The members of a union (``X | None`` is ``(X, None)``), or the type itself."""
    bare = _bare(annotation)
    if get_origin(bare) in (Union, types.UnionType):
        return tuple(_bare(a) for a in get_args(bare))
    return (bare,)


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _fields(struct: type) -> dict[str, msgspec.structs.FieldInfo]:
    return {f.encode_name: f for f in msgspec.structs.fields(struct)}


def _struct_of(annotation: Any, value: Any) -> type | None:
    """The Struct type a mapping ``value`` is checked against, if the annotation has one."""
    if not isinstance(value, dict):
        return None
    structs = [t for t in _options(annotation) if _is_struct(t)]
    return structs[0] if len(structs) == 1 else None


def _item_type(annotation: Any) -> Any | None:
    """The item annotation of a ``list[X]`` (under ``Annotated``/``Optional``)."""
    for option in _options(annotation):
        if get_origin(option) in (list, tuple, set, frozenset):
            args = get_args(option)
            if len(args) == 1 or (len(args) == 2 and args[1] is Ellipsis):
                return args[0]
    return None


def _value_type(annotation: Any) -> Any | None:
    for option in _options(annotation):
        if get_origin(option) is dict:
            return get_args(option)[1]
    return None


def _takes_int(annotation: Any) -> bool:
    options = _options(annotation)
    return int in options and float not in options


def _whole_numbers(value: Any, annotation: Any) -> Any:
    """``value`` with whole floats turned into ints where ``annotation`` wants an int; the
    same object when nothing changes."""
    if isinstance(value, float) and _takes_int(annotation):
        if math.isfinite(value) and value.is_integer() and abs(value) <= _MAX_EXACT_FLOAT:
            return int(value)
        return value
    struct = _struct_of(annotation, value)
    if struct is not None:
        fields = _fields(struct)
        changed = {
            k: _whole_numbers(v, fields[k].type) if k in fields else v for k, v in value.items()
        }
        same = all(changed[k] is value[k] for k in value)
        return value if same else changed
    item = _item_type(annotation)
    if item is not None and isinstance(value, list):
        items = [_whole_numbers(v, item) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    inner = _value_type(annotation)
    if inner is not None and isinstance(value, dict):
        entries = {k: _whole_numbers(v, inner) for k, v in value.items()}
        return value if all(entries[k] is value[k] for k in value) else entries
    return value


def _errors(value: Any, annotation: Any, path: str, strict: bool) -> list[tuple[str, str]]:
    """Each offending field under ``path``, found by converting fields one at a time."""
    struct = _struct_of(annotation, value)
    if struct is not None:
        return _struct_errors(value, struct, path, strict)
    item = _item_type(annotation)
    if item is not None and isinstance(value, list):
        found = [e for i, v in enumerate(value) for e in _errors(v, item, f"{path}[{i}]", strict)]
        if found:
            return found
    inner = _value_type(annotation)
    if inner is not None and isinstance(value, dict):
        found = [e for k, v in value.items() for e in _errors(v, inner, f"{path}.{k}", strict)]
        if found:
            return found
    try:
        msgspec.convert(value, annotation, strict=strict)
    except msgspec.ValidationError as exc:
        where, reason = field_error(exc, root=path)
        if isinstance(value, str) and where == path:
            reason += _choices_hint(value, annotation)
        return [(where, reason)]
    return []


def _choices_hint(value: str, annotation: Any) -> str:
    """For a string a ``Literal`` refuses: the values it takes, and the closest one."""
    allowed = [
        str(v) for t in _options(annotation) if get_origin(t) is Literal for v in get_args(t)
    ]
    if not allowed:
        return ""
    close = closest(value, allowed)
    hint = f"; did you mean `{close}`?" if close else ""
    return f" (one of: {', '.join(allowed)}{hint})"


def _struct_errors(
    value: dict[str, Any], struct: type, path: str, strict: bool
) -> list[tuple[str, str]]:
    fields = _fields(struct)
    errors: list[tuple[str, str]] = []
    config = getattr(struct, "__struct_config__", None)
    if getattr(config, "forbid_unknown_fields", False):
        for key in value:
            if key not in fields:
                errors.append((f"{path}.{key}", unknown_field(str(key), list(fields))))
    for name, field in fields.items():
        if name not in value:
            if field.required:
                errors.append((f"{path}.{name}", f"Object missing required field `{name}`"))
            continue
        errors.extend(_errors(value[name], field.type, f"{path}.{name}", strict))
    if not errors:
        # Every field is valid on its own: a rule across fields (a __post_init__) refused it.
        try:
            msgspec.convert(value, struct, strict=strict)
        except msgspec.ValidationError as exc:
            errors.append(field_error(exc, root=path))
    return errors


def unknown_field(key: str, known: list[str]) -> str:
    """msgspec's words for an unknown key, with the closest known field name."""
    close = closest(key, known)
    hint = f" (did you mean `{close}`?)" if close else ""
    return f"Object contains unknown field `{key}`{hint}"


def closest(name: str, known: typing.Iterable[str]) -> str | None:
    """The known name ``name`` most likely misspells, if one is close enough; a name
    that is the end of a known one counts (``quantization``, ``weight_quantization``)."""
    known = list(known)
    matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if matches:
        return matches[0]
    ends = [k for k in known if k.endswith("_" + name) or k.startswith(name + "_")]
    return ends[0] if len(ends) == 1 else None
