"""Writing an answer: JSON or YAML of any Struct, and the units a table prints."""

import sys
from typing import Any

import msgspec
import yaml

GiB = 1 << 30
MiB = 1 << 20

MACHINE_FORMATS = ("json", "yaml")


def machine(value: Any, fmt: str) -> str:
    """``value`` as indented JSON or as YAML, field order kept."""
    if fmt == "yaml":
        return yaml.safe_dump(msgspec.to_builtins(value), sort_keys=False, allow_unicode=True)
    return msgspec.json.format(msgspec.json.encode(value)).decode() + "\n"


def write(text: str) -> None:
    sys.stdout.write(text)


def num(value: float | None, fmt: str, missing: str = "-") -> str:
    """``value`` formatted, or ``missing`` when there is none."""
    return missing if value is None else format(value, fmt)


def size(nbytes: int) -> str:
    """Bytes in GiB, or MiB below one GiB (binary units, named so)."""
    return f"{nbytes / GiB:,.2f} GiB" if nbytes >= GiB else f"{nbytes / MiB:,.1f} MiB"
