"""Built-in model presets: Hugging Face configs stored as data (data/models.toml)."""

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from gpuplan.core.record import Record


class Preset(Record):
    name: str
    source: str
    config: dict[str, Any]
    parameters: int | None = None
    """The parameter count a public source states, when one does."""


@cache
def presets() -> dict[str, Preset]:
    text = (
        resources.files("gpuplan.core.memory.data")
        .joinpath("models.toml")
        .read_text(encoding="utf-8")
    )
    table = tomllib.loads(text)["models"]
    return {name: Preset(name=name, **body) for name, body in table.items()}
