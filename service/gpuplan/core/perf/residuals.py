"""The speed model's cross-validated residuals (data/residuals.toml), by kind of figure.

``bench/published/cv.py`` writes the file: every published run predicted by constants
fitted without its source, the log errors grouped by regime. The recommender draws each
candidate's intervals from them (:mod:`gpuplan.core.uncertainty`).
"""

import tomllib
from functools import cache
from importlib import resources

import msgspec

from gpuplan.core.errors import DataError
from gpuplan.core.record import Record
from gpuplan.core.uncertainty import ResidualTable

TRAINING = "tokens_per_s_per_gpu"
SERVING = "serving"


class _ResidualFile(Record):
    table: list[ResidualTable]


@cache
def residual_tables() -> dict[str, ResidualTable]:
    """The tables by measure: ``tokens_per_s_per_gpu`` (training) and ``serving``."""
    raw = resources.files("gpuplan.core.perf.data").joinpath("residuals.toml").read_text()
    try:
        tables = msgspec.convert(tomllib.loads(raw), _ResidualFile).table
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise DataError(f"core/perf/data/residuals.toml: {exc}") from exc
    found = {t.measure: t for t in tables}
    missing = {TRAINING, SERVING} - set(found)
    if missing:
        raise DataError(f"core/perf/data/residuals.toml: no table for {sorted(missing)}")
    return found
