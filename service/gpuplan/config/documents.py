"""Reading the documents users hand us (settings, catalog overrides): TOML, YAML, JSON.

One reader, so that every file a user writes is parsed the same way and every parse
error names the file.
"""

import json
import tomllib
from pathlib import Path
from typing import Any

import yaml

from gpuplan.core.errors import DataError


class DocumentError(DataError):
    """A file cannot be read or parsed; the message names it."""


SUFFIXES = (".toml", ".yaml", ".yml", ".json")


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
        return yaml.safe_load(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError, json.JSONDecodeError) as exc:
        kind = "YAML" if suffix == ".yml" else suffix[1:].upper()
        raise DocumentError(f"{path} is not valid {kind}: {exc}") from None
