"""Structs describe themselves: their attribute docstrings become field descriptions.

A request field is documented once, as the string literal after it in its Struct. The
OpenAPI document, the plan file's JSON Schema and the command line's option help all
read it from there, so the three cannot say different things.
"""

import ast
import inspect
import textwrap
from functools import cache
from typing import Any

import msgspec


@cache
def field_docstrings(cls: type) -> dict[str, str]:
    """Attribute docstrings (a string literal after a field) of ``cls`` and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or not issubclass(klass, msgspec.Struct) or klass is msgspec.Struct:
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):
            continue
        body = ast.parse(source).body[0]
        assert isinstance(body, ast.ClassDef)
        for node, after in zip(body.body, body.body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = inspect.cleandoc(after.value.value)
    return docs


def structs_under(roots: tuple[Any, ...]) -> tuple[type, ...]:
    """Every Struct type reachable from ``roots`` through their fields."""
    return _structs_under(tuple(roots))


@cache
def _structs_under(roots: tuple[Any, ...]) -> tuple[type, ...]:
    found: dict[type, None] = {}

    def visit(node: Any) -> None:
        if isinstance(node, msgspec.inspect.StructType):
            if node.cls in found:
                return
            found[node.cls] = None
            for field in node.fields:
                visit(field.type)
            return
        for attr in ("item_type", "key_type", "value_type"):
            if hasattr(node, attr):
                visit(getattr(node, attr))
        for attr in ("types", "item_types"):
            for sub in getattr(node, attr, ()):
                visit(sub)

    for info in msgspec.inspect.multi_type_info(list(roots)):
        visit(info)
    return tuple(found)


def describe_components(roots: list[Any], components: dict[str, Any]) -> None:
    """Copy attribute docstrings into the ``properties`` of each component schema that
    msgspec generated for ``roots`` (a property that has a description keeps it)."""
    by_name = {struct.__name__: struct for struct in structs_under(tuple(roots))}
    for name, schema in components.items():
        struct = by_name.get(name)
        if struct is None or "properties" not in schema:
            continue
        docs = field_docstrings(struct)
        for field in msgspec.structs.fields(struct):
            doc = docs.get(field.name)
            prop = schema["properties"].get(field.encode_name)
            if doc and prop is not None and "description" not in prop:
                prop["description"] = doc


def json_schema(root: type, ref_template: str = "#/$defs/{name}") -> dict[str, Any]:
    """JSON Schema (2020-12) of ``root`` with its field descriptions and ``$defs``."""
    (schema,), defs = msgspec.json.schema_components([root], ref_template=ref_template)
    describe_components([root], defs)
    return {**schema, "$defs": dict(sorted(defs.items()))}
