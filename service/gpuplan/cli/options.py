"""Command-line options generated from the request Structs: each field is declared once.

A request field is declared in its Struct (type, bounds, choices, docstring); the option
that sets it is made from that declaration here, so a field added to the schema gets its
flag, its choices and its help without a line of CLI code, and the CLI cannot offer a
choice the API refuses. A flag's value lands at the field's place in the request
document, and the document is validated as the API validates a body: a bad value is
refused naming its JSONPath, never by a second set of rules here.

Flags are the field names with dashes (``--batch-size``); a field of a nested table
takes the table's name first (``--parallelism-tensor``, ``--lora-rank``). The short
names earlier versions had (``--seq-len``, ``--tensor-parallel``) stay as aliases.
"""

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple, TypeVar, get_args, get_origin

import click
import msgspec
from msgspec import inspect as mi

from gpuplan.config.documents import read_document
from gpuplan.core.convert import convert
from gpuplan.core.describe import field_docstrings
from gpuplan.core.errors import InvalidRequest

F = TypeVar("F", bound=Callable[..., Any])

ALIASES: Mapping[str, tuple[str, ...]] = {
    "workload.sequence_length": ("--seq-len",),
    "workload.gradient_checkpointing": ("--checkpointing",),
    "workload.gradient_accumulation_steps": ("--accumulation",),
    "workload.weight_quantization": ("--quantization",),
    "workload.parallelism.tensor": ("--tensor-parallel",),
    "workload.parallelism.pipeline": ("--pipeline-parallel",),
    "workload.parallelism.data": ("--data-parallel",),
    "workload.parallelism.expert": ("--expert-parallel",),
    "workload.parallelism.zero_stage": ("--zero-stage",),
    "workload.parallelism.framework": ("--framework",),
    "training.training_tokens": ("--tokens",),
    "inference.requests_per_second": ("--rps",),
    "constraints.max_gpus_per_job": ("--max-gpus",),
    "constraints.vendors": ("--vendor",),
    "pricing.providers": ("--provider",),
}
"""Earlier or shorter names of generated flags, by the field's dotted path."""

FLAT_SECTIONS = frozenset({"workload", "constraints", "training", "inference", "efficiency"})
"""Tables of a request whose fields are flags of their own name (``--objective``,
``--max-gpus-per-job``); fields of other tables carry the table's name first."""


class Number(click.ParamType[Any]):
    """An integer, also written with an exponent (``2e8``); a fraction is passed on for
    the schema to refuse with the field's path."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int):
            return value
        try:
            return int(value)
        except ValueError:
            pass
        try:
            number = float(value)
        except ValueError:
            self.fail(f"{value!r} is not a number", param, ctx)
        return int(number) if number.is_integer() and abs(number) <= 2**53 else number


class NumberOrWord(Number):
    """An integer, or one of a few words (``max_model_len``: a length or ``auto``)."""

    def __init__(self, words: Sequence[str]) -> None:
        self.words = tuple(words)
        self.name = f"integer|{'|'.join(self.words)}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value in self.words:
            return value
        return super().convert(value, param, ctx)


class FieldOption(NamedTuple):
    """A generated option: where its value goes in the request document."""

    path: tuple[str, ...]
    option: click.Option

    @property
    def name(self) -> str:
        return self.option.name or ""


_SCALARS: Mapping[type, Callable[[], "click.ParamType[Any]"]] = {
    mi.IntType: Number,
    mi.FloatType: lambda: click.FLOAT,
    mi.StrType: lambda: click.STRING,
    mi.BoolType: lambda: click.BOOL,
}


def _scalar(info: mi.Type) -> "tuple[click.ParamType[Any] | None, bool]":
    """The option type of a field, and whether it repeats; ``None`` for no option."""
    if isinstance(info, mi.UnionType):
        return _union(info)
    if type(info) in _SCALARS:
        return _SCALARS[type(info)](), False
    if isinstance(info, mi.LiteralType) and all(isinstance(v, str) for v in info.values):
        return click.Choice([str(v) for v in info.values]), False
    if isinstance(info, mi.ListType | mi.SetType):
        item, repeats = _scalar(info.item_type)
        return (item, True) if item is not None and not repeats else (None, False)
    return None, False


def _union(info: mi.UnionType) -> "tuple[click.ParamType[Any] | None, bool]":
    """An optional field's type; a Literal with its deprecated spellings (one choice of
    all their values); an integer or a few words (``max_model_len``: ``auto``)."""
    rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
    if len(rest) == 1:
        return _scalar(rest[0])
    words = [v for t in rest if isinstance(t, mi.LiteralType) for v in t.values]
    if all(isinstance(t, mi.LiteralType) for t in rest):
        return _scalar(mi.LiteralType(tuple(words)))
    numbers = [t for t in rest if isinstance(t, mi.IntType)]
    if (
        len(numbers) == 1
        and len(rest) == len(numbers) + 1
        and all(isinstance(v, str) for v in words)
    ):
        return NumberOrWord([str(v) for v in words]), False
    return None, False


def _struct(info: mi.Type) -> type | None:
    if isinstance(info, mi.UnionType):
        rest = [t for t in info.types if not isinstance(t, mi.NoneType)]
        return _struct(rest[0]) if len(rest) == 1 else None
    return info.cls if isinstance(info, mi.StructType) else None


def _help(doc: str, path: str, default: Any) -> str:
    first = doc.split("\n\n", maxsplit=1)[0].replace("\n", " ").replace("``", "`") if doc else ""
    shown = default not in (None, msgspec.NODEFAULT, (), []) and not callable(default)
    return f"{first} [{path}{f'; default: {default}' if shown else ''}]".strip()


def _walk(
    struct: type,
    path: tuple[str, ...],
    flag: str,
    skip: frozenset[str],
    aliases: Mapping[str, tuple[str, ...]],
) -> Iterator[FieldOption]:
    docs = field_docstrings(struct)
    for field in msgspec.structs.fields(struct):
        here = (*path, field.encode_name)
        dotted = ".".join(here)
        if dotted in skip:
            continue
        info = mi.type_info(field.type)
        nested = _struct(info)
        name = field.encode_name.replace("_", "-")
        if nested is not None:
            inner = name if not path and field.encode_name in FLAT_SECTIONS else f"{flag}{name}"
            prefix = "" if not path and field.encode_name in FLAT_SECTIONS else f"{inner}-"
            yield from _walk(nested, here, prefix, skip, aliases)
            continue
        kind, repeats = _scalar(info)
        if kind is None:
            continue
        names = [f"--{flag}{name}", *aliases.get(dotted, ())]
        if kind is click.BOOL:
            names = [f"--{flag}{name}/--no-{flag}{name}"]
            kind = None
        yield FieldOption(
            here,
            click.Option(
                [*names, "__".join(here)],
                type=kind,
                multiple=repeats,
                default=None,
                help=_help(docs.get(field.name, ""), "$." + dotted, field.default),
            ),
        )


def field_options(
    struct: type,
    skip: Sequence[str] = (),
    aliases: Mapping[str, tuple[str, ...]] = ALIASES,
) -> list[FieldOption]:
    """Options for the fields of ``struct``, except ``skip`` (dotted paths). Raises
    ``ValueError`` if two fields would share a flag."""
    options = list(_walk(struct, (), "", frozenset(skip), aliases))
    seen: dict[str, tuple[str, ...]] = {}
    for item in options:
        for opt in (*item.option.opts, *item.option.secondary_opts):
            if opt in seen:
                raise ValueError(f"{opt} would set both {seen[opt]} and {item.path}")
            seen[opt] = item.path
    return options


MODEL_OPTIONS = (
    click.Option(
        ["--model", "model_name"],
        help="A built-in preset, e.g. llama-3.1-8b (GET /v1/models lists them). [$.model.name]",
    ),
    click.Option(
        ["--hf-config"],
        type=click.Path(dir_okay=False, path_type=Path),
        help="A Hugging Face config.json, read offline. [$.model.hf_config]",
    ),
    click.Option(
        ["--parameters"], type=Number(), help="A bare parameter count. [$.model.parameters]"
    ),
)
"""The model: one of a preset, a config file or a count (replacing a file's ``model``)."""

MODEL_SKIPPED = ("model.hf_config", "model.name", "model.parameters", "model.hints")
"""Model fields set by MODEL_OPTIONS (or, for hints, only from a file)."""


def _set(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node = doc
    for depth, key in enumerate(path[:-1]):
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            where = "$." + ".".join(path[: depth + 1])
            raise InvalidRequest([(where, "expected a table, to set a field of it from a flag")])
        node = child
    node[path[-1]] = value


class RequestOptions:
    """The options of one request type: ``-f/--file``, the model, and a flag per field.

    Decorate a command with :meth:`options`; in it, :meth:`request` turns what Click
    passed into the request, validated as the API validates a body. ``defaults`` (dotted
    path: value) fill fields a request built from flags alone leaves out.
    """

    def __init__(self, request: type, defaults: Mapping[str, Any] | None = None) -> None:
        self.type = request
        # The model's identity has its own options (MODEL_OPTIONS); its other fields
        # (model.head, model.num_labels) are generated flags like the rest.
        self.fields = field_options(request, skip=MODEL_SKIPPED)
        self.defaults = dict(defaults or {})

    def options(self, command: F) -> F:
        file_option = click.Option(
            ["-f", "--file", "request_file"],
            type=click.Path(dir_okay=False, path_type=Path),
            help="A request file (YAML, JSON or TOML) of the API's schema; flags override "
            "its fields.",
        )
        return with_options([file_option, *MODEL_OPTIONS, *(f.option for f in self.fields)])(
            command
        )

    def request(self, values: dict[str, Any]) -> Any:
        """The request the options describe (raises ``InvalidRequest`` naming each field)."""
        doc = request_document(values.get("request_file"), values, self.fields)
        if values.get("request_file") is None:
            for dotted, value in self.defaults.items():
                path = tuple(dotted.split("."))
                node = doc
                for key in path[:-1]:
                    node = node.setdefault(key, {})
                node.setdefault(path[-1], value)
        return convert(doc, self.type)


def request_document(
    request_file: Path | None, values: dict[str, Any], fields: Sequence[FieldOption]
) -> dict[str, Any]:
    """The request file's document (or an empty one) with the flags set over it."""
    doc: Any = read_document(request_file) if request_file is not None else {}
    if not isinstance(doc, dict):
        raise InvalidRequest([("$", f"{request_file} must hold a table/object (the request)")])
    model: dict[str, Any] = {}
    if values.get("model_name"):
        model["name"] = values["model_name"]
    if values.get("parameters") is not None:
        model["parameters"] = values["parameters"]
    if values.get("hf_config") is not None:
        model["hf_config"] = _json_file(values["hf_config"], "$.model.hf_config")
    if model:
        doc["model"] = model  # a model named on the command line replaces the file's
    for item in fields:
        value = values.get(item.name)
        if value is None or value == ():
            continue
        _set(doc, item.path, list(value) if isinstance(value, tuple) else value)
    return doc


def _json_file(path: Path, where: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest([(where, f"cannot read {path} as JSON: {exc}")]) from None


def with_options(options: Sequence[click.Option]) -> Callable[[F], F]:
    """Decorate a command with ready-made ``options``, in their order."""

    def decorate(command: F) -> F:
        params = getattr(command, "__click_params__", [])
        params.extend(reversed(options))
        command.__click_params__ = params  # type: ignore[attr-defined]
        return command

    return decorate


def output_format(*formats: str) -> Callable[[F], F]:
    """``--format`` of a command's answer, the first of ``formats`` by default; the
    command takes ``fmt``."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(formats),
        default=formats[0],
        show_default=True,
        help="How the answer is printed.",
    )


def choices(literal: Any) -> click.Choice[str]:
    """A Click choice of a ``Literal`` type's values (for options outside a request)."""
    assert get_origin(literal) is Literal
    return click.Choice([str(v) for v in get_args(literal)])
