"""A layout of the search's ladder, prepared once per request for timing and sizing on
every GPU (:mod:`gpuplan.core.recommend.training`; the memory oracle keeps them)."""

from typing import NamedTuple

from gpuplan.core.memory.schema import Workload
from gpuplan.core.perf.efficiency import Framework
from gpuplan.core.perf.step_records import StepShape
from gpuplan.core.recommend.schema import ParallelLayout


class Rung(NamedTuple):
    """One layout of a count's ladder and what of its timing does not depend on the GPU,
    prepared once per request and workload: the ladder is the same on every GPU, so the
    same work need not be redone for each of them."""

    layout: ParallelLayout
    laid: Workload
    """The workload split as the layout says (what the estimator sizes)."""

    key: bytes
    """``laid``'s memo key in the memory oracle."""

    shape: StepShape
    framework: Framework
    spans: tuple[int, int, int, int, int]
    """GPUs each group's ring spans: tensor, context, expert, pipeline, data
    (``training._step_links``)."""

    micro: tuple[bytes, int, int, int, int, float, bool]
    """What of the rung :func:`~gpuplan.core.perf.step.micro_batch` reads: the step shape
    but its accumulation, the tensor, pipeline, context and expert degrees (the experts'
    rows), and the framework's elementwise factor and whether it is Megatron (PEFT's
    adapter passes run under any other). Rungs alike in it share a micro-batch's compute
    on a GPU, as data-parallel layouts of every count and framework do
    (tests/test_search_shortcuts.py checks that ``micro_batch`` reads nothing else)."""
