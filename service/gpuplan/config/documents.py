"""Reading the documents users hand us (settings, catalog overrides): TOML, YAML, JSON.

One reader, so that every file a user writes is parsed the same way and every parse
error names the file.
"""

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from gpuplan.core.errors import DataError


class DocumentError(DataError):
    """A file cannot be read or parsed; the message names it."""


SUFFIXES = (".toml", ".yaml", ".yml", ".json")


class _Loader(yaml.SafeLoader):
    """Safe YAML that reads ``2e8`` and ``1.5e9`` as numbers, as YAML 1.2 and JSON do.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so
    ``training_tokens: 2e8`` would be the string "2e8" and fail as "expected int"."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _safe_load(text: str) -> Any:
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_document(path: Path) -> Any:
    """Parse ``path`` by its suffix; an empty YAML file is ``None``."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise DocumentError(f"{path}: unknown format {suffix!r}; use .toml, .yaml, .yml or .json")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"cannot read {path}: {exc}") from None
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
        return _safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        kind = "YAML" if suffix == ".yml" else suffix[1:].upper()
        raise DocumentError(f"{path} is not valid {kind}: {exc}") from None
