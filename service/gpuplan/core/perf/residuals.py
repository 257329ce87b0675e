"""The speed model's cross-validated residuals (data/residuals.toml), by kind of figure,
and the queueing model's against its simulation (data/queue_residuals.toml).

``bench/published/cv.py`` writes the first: every published run predicted by constants
fitted without its source, the log errors grouped by regime. ``bench/serving/queue_sim.py``
writes the second. The recommender draws each candidate's intervals from them
(:mod:`gpuplan.core.uncertainty`).
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
QUEUE_TTFT = "ttft_p50_s"
QUEUE_TPOT = "tpot_p50_s"
"""The queueing model's tables (data/queue_residuals.toml): its p50 TTFT and TPOT under
load against a discrete-event simulation of the same scheduler and steps."""


class _ResidualFile(Record):
    table: list[ResidualTable]


def _read(name: str, needed: set[str]) -> dict[str, ResidualTable]:
    raw = resources.files("gpuplan.core.perf.data").joinpath(name).read_text()
    try:
        tables = msgspec.convert(tomllib.loads(raw), _ResidualFile).table
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise DataError(f"core/perf/data/{name}: {exc}") from exc
    found = {t.measure: t for t in tables}
    missing = needed - set(found)
    if missing:
        raise DataError(f"core/perf/data/{name}: no table for {sorted(missing)}")
    return found


@cache
def residual_tables() -> dict[str, ResidualTable]:
    """The tables by measure: ``tokens_per_s_per_gpu`` (training) and ``serving``."""
    return _read("residuals.toml", {TRAINING, SERVING})


@cache
def queue_residual_tables() -> dict[str, ResidualTable]:
    """The queueing model's tables by measure (:data:`QUEUE_TTFT`, :data:`QUEUE_TPOT`),
    grouped by load (``load_regime``): ``bench/serving/queue_sim.py`` writes them from
    its comparison with the simulation. The model has no constant fitted to that
    simulation, so its residuals there are out of sample."""
    return _read("queue_residuals.toml", {QUEUE_TTFT, QUEUE_TPOT})


def load_regime(utilization: float) -> str:
    """The load regime of a replica at ``utilization`` of its saturation rate (the
    simulation's residuals are grouped by the same rule)."""
    if utilization <= 0.5:
        return "up to 50%"
    if utilization <= 0.8:
        return "50-80%"
    if utilization <= 0.9:
        return "80-90%"
    return "over 90%"
