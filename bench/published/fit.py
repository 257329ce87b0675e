"""Fit the speed model's efficiencies to the calibration runs of runs.toml.

    python -m bench.published.fit          # print the fitted values and the errors
    python -m bench.published.fit --write  # also write them into data/efficiency.toml

Least squares on the log of predicted / measured (tokens per second per GPU for a
training run, the run's own measure for a serving run), over the runs marked
``calibration`` (the ``check`` runs are never fitted), with bounds that keep
each value physical and a weak pull towards its prior (a value no run informs stays
put). Each run is timed through the same functions ``recommend`` uses, with the job,
GPU and layout resolved once; the fit changes the loaded efficiency data in place, in
this process only.
"""

import argparse
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
from scipy.optimize import least_squares

from bench.published.runs import load, predict_serving
from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf.efficiency import efficiency_data, framework
from gpuplan.core.recommend import RecommendRequest
from gpuplan.core.recommend.context import gpu_context
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import resolve_job
from gpuplan.core.recommend.training import given_option

DATA = (
    Path(__file__).resolve().parents[2]
    / "service"
    / "gpuplan"
    / "core"
    / "perf"
    / "data"
    / "efficiency.toml"
)
PRIOR_WEIGHT = 0.05
"""How strongly a value is pulled to its prior, against a run's log error."""
TOLERANCE = 0.2
"""A run's log error beyond this (about 22%) is charged again, ``EXCESS_WEIGHT`` times
over: least squares alone lets one odd run sit far off to gain a little on many, and the
suite is judged on its worst run as well as its median."""
EXCESS_WEIGHT = 3.0


@dataclass
class Parameter:
    name: str
    get: Callable[[], float]
    put: Callable[[float], None]
    low: float
    high: float
    prior: float = 0.0
    log: bool = False


def _attr(obj: Any, field: str, low: float, high: float, name: str, log: bool = False) -> Parameter:
    return Parameter(
        name,
        lambda: float(getattr(obj, field)),
        lambda v: setattr(obj, field, v),
        low,
        high,
        log=log,
    )


def _fp8_share(g: Any, name: str) -> Parameter:
    """A generation's fp8 GEMM plateau as a share of its 16-bit one."""

    def get() -> float:
        return float(g.fp8_gemm_efficiency / g.gemm_efficiency)

    def put(v: float) -> None:
        g.fp8_gemm_efficiency = v * g.gemm_efficiency

    return Parameter(f"{name}.fp8_gemm_efficiency / gemm_efficiency", get, put, 0.3, 1.0)


def parameters() -> list[Parameter]:
    data = efficiency_data()
    gens = {g.name: g for g in data.generations}
    params = []
    # Hopper's and Blackwell's GEMM and attention efficiencies are not fitted: every
    # published run of those generations is on a GPU a measured kernel table times
    # (core/perf/data/kernels), so no run says anything of them; they keep the values
    # fitted before, for the cards no table covers. Ampere's still time the A100 40GB.
    for name in ("ampere-volta-datacenter",):
        g = gens[name]
        params.append(_attr(g, "gemm_efficiency", 0.4, 0.95, f"{name}.gemm_efficiency"))
        params.append(_attr(g, "attention_efficiency", 0.2, 0.85, f"{name}.attention_efficiency"))
    for name in ("ampere-volta-datacenter", "hopper"):
        params.append(
            _attr(
                gens[name],
                "decode_bandwidth_efficiency",
                0.3,
                0.95,
                f"{name}.decode_bandwidth_efficiency",
            )
        )
    k = data.kernels
    params += [
        _attr(k, "gemm_half_width", 16.0, 4096.0, "kernels.gemm_half_width", log=True),
        _attr(k, "gemm_half_tokens", 1.0, 4096.0, "kernels.gemm_half_tokens", log=True),
        _attr(
            k,
            "elementwise_bytes_per_hidden",
            4.0,
            400.0,
            "kernels.elementwise_bytes_per_hidden",
            log=True,
        ),
        _attr(k, "compile_elementwise_factor", 0.3, 1.0, "kernels.compile_elementwise_factor"),
        _attr(k, "layer_overhead_seconds", 1e-6, 2e-3, "kernels.layer_overhead_seconds", log=True),
        _attr(k, "measured_kernel_share", 0.5, 1.0, "kernels.measured_kernel_share"),
    ]
    params.append(
        _attr(framework("megatron"), "tensor_exposed", 0.0, 1.0, "megatron.tensor_exposed")
    )
    params.append(
        _attr(framework("megatron"), "elementwise_factor", 0.1, 1.0, "megatron.elementwise_factor")
    )
    params.append(
        _attr(
            framework("deepspeed"), "gather_hidden_share", 0.0, 1.0, "deepspeed.gather_hidden_share"
        )
    )
    for p in params:
        p.prior = p.get()
    return params


class Case:
    """A run with its job, GPU and layout resolved once."""

    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run
        request = msgspec.convert(run["request"], RecommendRequest)
        catalog = builtin_catalog()
        self.job = resolve_job(request, catalog)
        self.gpu = catalog.get(run["gpu"])
        self.oracle = MemoryOracle(request.model, catalog)
        base = self.oracle.first(self.job.workload)
        self.trainable = base.trainable_parameters
        self.request = request
        self.measured = float(run["tokens_per_s_per_gpu"])

    def predicted(self) -> float:
        ctx = gpu_context(
            self.gpu,
            self.job,
            self.request.efficiency.mfu,
            self.request.efficiency.mbu,
            self.request.constraints,
        )
        option = given_option(self.job, ctx, self.oracle, self.request.constraints, self.trainable)
        assert option.throughput is not None
        return option.throughput.value / option.count


class ServingCase:
    """A serving run: its measure (time to first token, time per output token,
    tokens or requests per second) through the public entry point."""

    def __init__(self, run: dict[str, Any]) -> None:
        self.run = run
        self.measured = float(run["value"])

    def predicted(self) -> float:
        value = predict_serving(self.run)
        assert value is not None, self.run["id"]
        return value


def _vector(params: list[Parameter]) -> np.ndarray:
    return np.array([math.log(p.get()) if p.log else p.get() for p in params])


def _put(params: list[Parameter], x: np.ndarray) -> None:
    for p, v in zip(params, x, strict=True):
        p.put(math.exp(v) if p.log else float(v))


def fit(
    cases: list[Case | ServingCase], params: list[Parameter], priors: list[float] | None = None
) -> None:
    """Fit ``params`` to ``cases`` in place, each pulled weakly towards its prior: its
    value now, or ``priors`` (one per parameter; the cross-validation's neutral ones)."""
    x0 = _vector(params)
    low = np.array([math.log(p.low) if p.log else p.low for p in params])
    high = np.array([math.log(p.high) if p.log else p.high for p in params])
    if priors is None:
        prior = x0.copy()
    else:
        prior = np.array([math.log(v) if p.log else v for p, v in zip(params, priors, strict=True)])
    scale = np.maximum(np.abs(prior), 1e-9)

    def residuals(x: np.ndarray) -> np.ndarray:
        _put(params, x)
        errors = [math.log(c.predicted() / c.measured) for c in cases]
        excess = [EXCESS_WEIGHT * max(0.0, abs(e) - TOLERANCE) for e in errors]
        pull = PRIOR_WEIGHT * (x - prior) / scale
        return np.array(errors + excess + list(pull))

    result = least_squares(residuals, np.clip(x0, low, high), bounds=(low, high), diff_step=1e-3)
    _put(params, result.x)


def _fp8(generation: str) -> float:
    return next(
        g.fp8_gemm_efficiency for g in efficiency_data().generations if g.name == generation
    )


def write(params: list[Parameter]) -> None:
    """The fitted values into efficiency.toml, in place of the old ones."""
    blocks = re.split(r"(?m)^(?=\[)", DATA.read_text(encoding="utf-8"))
    for p in params:
        section, field = p.name.split(" / ")[0].split(".")
        value = p.get() if " / " not in p.name else _fp8(section)
        shown = f"{value:.3g}" if value < 1e-2 else f"{value:.3f}" if value < 10 else f"{value:.1f}"
        for i, block in enumerate(blocks):
            named = f'name = "{section}"\n' in block or block.startswith(f"[{section}]")
            if named:
                blocks[i], n = re.subn(rf"(?m)^{field} = .*$", f"{field} = {shown}", block, count=1)
                assert n == 1, p.name
                break
        else:
            raise AssertionError(f"no section {section}")
    DATA.write_text("".join(blocks), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="write the fitted values")
    args = parser.parse_args()
    runs = load()
    serving = load("inference")
    calibration: list[Case | ServingCase] = [Case(r) for r in runs if r["split"] == "calibration"]
    calibration += [ServingCase(r) for r in serving if r["split"] == "calibration"]
    check: list[Case | ServingCase] = [Case(r) for r in runs if r["split"] == "check"]
    check += [ServingCase(r) for r in serving if r["split"] == "check"]
    params = parameters()
    fit(calibration, params)
    for p in params:
        print(f"{p.name:<48} {p.prior:>10.4g} -> {p.get():>10.4g}")
    for label, cases in (("calibration", calibration), ("check", check)):
        errors = sorted(abs(c.predicted() / c.measured - 1) for c in cases)
        print(f"{label}: median {errors[len(errors) // 2]:.1%}, worst {errors[-1]:.1%}")
        for c in cases:
            print(f"  {c.run['id']:<46} {c.predicted() / c.measured - 1:+.1%}")
    if args.write:
        write(params)
        print(f"wrote {DATA}")


if __name__ == "__main__":
    main()
