"""The queueing model of ``core/perf/queueing.py`` against a discrete-event simulation.

    PYTHONPATH=service:. python -m bench.serving.queue_sim [--requests 20000]

The simulation runs the engine's scheduler step by step: Poisson arrivals (seeded), at
most ``cap`` sequences in flight, the rest waiting first come first served; each step
decodes one token of every sequence past its prompt and fills the rest of the token
budget with chunks of prompts, oldest first; a prompt's last chunk yields its first token.
Each step lasts what the speed model's step function says (``step_seconds``, the very
function the recommendation reads, not the model's table of it). TTFT is arrival to
first token; TPOT is first to last token over the tokens after the first (as vLLM's
``benchmark_serving`` reports them). The first 10% of requests are dropped (warm-up).

For each case (a plan of the recommendation, at its planned concurrency) and load (share
of the saturation rate) it writes the model's and the simulation's p50, p95 and p99 and
the model's error, to ``bench/results/queue_model.json``.
"""

import argparse
import json
import math
import random
import statistics
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from gpuplan.core.catalog import builtin_catalog
from gpuplan.core.perf.queueing import (
    QUANTILES,
    Scheduler,
    StepFn,
    StepTable,
    saturation_rate,
    under_load,
)
from gpuplan.core.perf.residuals import QUEUE_TPOT, QUEUE_TTFT, load_regime
from gpuplan.core.perf.serve import Replica, step_seconds
from gpuplan.core.recommend import RecommendRequest
from gpuplan.core.recommend.context import gpu_context, link_over
from gpuplan.core.recommend.fit import MemoryOracle
from gpuplan.core.recommend.job import resolve_job
from gpuplan.core.recommend.rank import recommend
from gpuplan.core.recommend.schema import ParallelLayout
from gpuplan.core.recommend.serving import replica_memory, serve_shape
from gpuplan.core.uncertainty import Residual, build_table, tables_toml

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results" / "queue_model.json"

CASES: dict[str, dict[str, Any]] = {
    "llama-3.1-70b, 2 x h200, 2048 in / 512 out": {
        "model": {"name": "llama-3.1-70b"},
        "workload": {"mode": "inference", "sequence_length": 2048, "max_new_tokens": 512},
        "inference": {"requests_per_second": 1},
        "constraints": {"include": ["h200-sxm-141gb"], "gpu_counts": [2]},
    },
    "llama-3.1-8b, 1 x h100, 1024 in / 256 out": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 1024, "max_new_tokens": 256},
        "inference": {"requests_per_second": 1},
        "constraints": {"include": ["h100-sxm5-80gb"], "gpu_counts": [1]},
    },
    "llama-3.1-8b, 1 x l4, 4096 in / 128 out, cap 32": {
        "model": {"name": "llama-3.1-8b"},
        "workload": {"mode": "inference", "sequence_length": 4096, "max_new_tokens": 128},
        "inference": {"requests_per_second": 0.1, "max_concurrency": 32},
        "constraints": {"include": ["l4-24gb"], "gpu_counts": [1]},
    },
}

LOADS = (0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95)


def replica_of(body: dict[str, Any]) -> tuple[StepFn, Scheduler]:
    """The step function and scheduler of the recommendation's plan for ``body``."""
    catalog = builtin_catalog()
    request = msgspec.convert(body, RecommendRequest)
    answer = recommend(request, catalog)
    top = answer.recommendations[0]
    assert top.latency is not None
    assert top.layout is not None
    tp, cap = top.layout.tensor, top.latency.concurrency
    job = resolve_job(request, catalog)
    gpu = catalog.lookup(top.gpu, "$")
    ctx = gpu_context(gpu, job, None, None, request.constraints)
    oracle = MemoryOracle(request.model, catalog, job.given.fsdp1)
    layout = ParallelLayout(tensor=tp, pipeline=1, data=1, zero_stage=0)
    workload, key = oracle.laid_out(job.workload, layout)
    memory = replica_memory(job, oracle, workload, gpu, tp, key=key)
    assert memory is not None
    assert ctx.rates is not None
    shape = serve_shape(job, workload, memory)
    replica = Replica(
        tp=tp, rates=ctx.rates, mbu=ctx.mbu, link=link_over(gpu, tp, request.constraints)
    )

    def step(n: float, p: float) -> float:
        return step_seconds(job.flops, shape, replica, decode=round(n), prompt=p)[0]

    sched = Scheduler(
        cap=cap,
        budget=memory.token_budget,
        prompt_tokens=job.prompt_tokens,
        output_tokens=job.output_tokens,
    )
    return step, sched


def simulate(
    step: StepFn, sched: Scheduler, rate: float, requests: int, seed: int
) -> dict[str, list[float]]:
    """TTFT and TPOT of every request after the warm-up, one engine step at a time."""
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        arrivals.append(t)
    s, o, cap, budget = sched.prompt_tokens, sched.output_tokens, sched.cap, sched.budget
    waiting: deque[int] = deque()
    prefilling: deque[list[int]] = deque()  # [request, prompt tokens left]
    decoding: deque[tuple[int, int, float]] = deque()  # (last step, request, first token)
    ttft = [math.nan] * requests
    tpot = [math.nan] * requests
    now, nxt, steps, done = 0.0, 0, 0, 0
    while done < requests:
        while nxt < requests and arrivals[nxt] <= now:
            waiting.append(nxt)
            nxt += 1
        while waiting and len(prefilling) + len(decoding) < cap:
            prefilling.append([waiting.popleft(), s])
        if not prefilling and not decoding:
            now = arrivals[nxt]
            continue
        d = len(decoding)
        room, prompt = max(budget - d, 0), 0
        finished_prompts = []
        for entry in prefilling:
            if prompt >= room:
                break
            take = min(entry[1], room - prompt)
            entry[1] -= take
            prompt += take
            if entry[1] == 0:
                finished_prompts.append(entry[0])
        now += step(d, prompt)
        steps += 1
        while decoding and decoding[0][0] == steps:
            _, r, first = decoding.popleft()
            tpot[r] = (now - first) / (o - 1)
            done += 1
        for r in finished_prompts:
            prefilling.popleft()
            ttft[r] = now - arrivals[r]
            if o == 1:
                tpot[r] = 0.0
                done += 1
            else:
                decoding.append((steps + o - 1, r, now))
    keep = slice(requests // 10, requests)
    return {"ttft_s": ttft[keep], "tpot_s": tpot[keep]}


def _quantiles(xs: list[float]) -> list[float]:
    cuts = statistics.quantiles(xs, n=100, method="inclusive")
    return [cuts[round(q * 100) - 1] for q in QUANTILES]


def run(requests: int = 20_000, seed: int = 1) -> dict[str, Any]:
    rows = []
    for name, body in CASES.items():
        step, sched = replica_of(body)
        table = StepTable(step, sched)
        sat = saturation_rate(table)
        for load in LOADS:
            rate = load * sat
            model = under_load(table, rate)
            sim = simulate(step, sched, rate, requests, seed)
            row: dict[str, Any] = {
                "case": name,
                "cap": sched.cap,
                "load": load,
                "rate_per_s": round(rate, 4),
            }
            for figure, got in (("ttft_s", model.ttft_s), ("tpot_s", model.tpot_s)):
                measured = _quantiles(sim[figure])
                for q, m, x in zip(("p50", "p95", "p99"), got, measured, strict=True):
                    row[f"{figure}_{q}_model"] = round(m, 5)
                    row[f"{figure}_{q}_sim"] = round(x, 5)
                    row[f"{figure}_{q}_error"] = round(m / x - 1, 4)
            rows.append(row)
            print(
                f"{name[:28]:<28} load {load:4.2f}: TTFT p50/p95/p99 err "
                + " ".join(f"{row[f'ttft_s_{q}_error']:+.0%}" for q in ("p50", "p95", "p99"))
                + "  TPOT "
                + " ".join(f"{row[f'tpot_s_{q}_error']:+.0%}" for q in ("p50", "p95", "p99"))
            )
    summary = {}
    for figure in ("ttft_s", "tpot_s"):
        for q in ("p50", "p95", "p99"):
            errors = sorted(abs(r[f"{figure}_{q}_error"]) for r in rows)
            summary[f"{figure}_{q}"] = {
                "median_abs_error": round(statistics.median(errors), 4),
                "max_abs_error": round(errors[-1], 4),
                "within_90": {
                    "median_abs_error": round(
                        statistics.median(
                            abs(r[f"{figure}_{q}_error"]) for r in rows if r["load"] <= 0.9
                        ),
                        4,
                    )
                },
            }
    return {
        "requests": requests,
        "seed": seed,
        "loads": list(LOADS),
        "rows": rows,
        "summary": summary,
    }


def cli(
    doc: str | None, run_with: Callable[[int, int], dict[str, Any]], results: Path
) -> dict[str, Any]:
    """A simulation bench's command line: ``--requests`` and ``--seed``, the result
    written to ``results``, its summary printed, and returned."""
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    result = run_with(args.requests, args.seed)
    results.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return result


QUEUE_RESIDUALS = ROOT / "service" / "gpuplan" / "core" / "perf" / "data" / "queue_residuals.toml"
"""The queueing model's residual tables, which the recommender's intervals read."""

FIGURES = {QUEUE_TTFT: "ttft_s_p50", QUEUE_TPOT: "tpot_s_p50"}
"""The tables' measures and the rows' figures they are drawn from: the p50s, the
figures a plan gives intervals for."""


def residuals_toml(rows: list[dict[str, Any]]) -> str:
    """The queueing model's residual tables from the rows of :func:`run`: for each p50,
    log(model / simulation) of every case and load, grouped by load (``load_regime``)."""
    tables = []
    for measure, figure in FIGURES.items():
        residuals = [
            Residual(
                source=r["case"],
                gpus=1,
                regime={"load": load_regime(r["load"])},
                log_error=math.log(r[f"{figure}_model"] / r[f"{figure}_sim"]),
            )
            for r in rows
        ]
        tables.append(
            build_table(
                residuals,
                ("load",),
                measure=measure,
                written_by="python -m bench.serving.queue_sim",
                method=(
                    "the queueing model against a discrete-event simulation of the same "
                    "scheduler and step function (no constant fitted to it), "
                    "bench/serving/queue_sim.py"
                ),
            )
        )
    return tables_toml(
        tables,
        [
            "Residuals of the queueing model (core/perf/queueing.py) against a discrete-event",
            "simulation of the engine's scheduler: what the p50s under load add to the step",
            "time's error in their intervals. Written by `python -m bench.serving.queue_sim`;",
            "do not edit. A residual is log(model / simulation).",
        ],
    )


def main() -> None:
    result = cli(__doc__, run, RESULTS)
    QUEUE_RESIDUALS.write_text(residuals_toml(result["rows"]), encoding="utf-8")


if __name__ == "__main__":
    main()
