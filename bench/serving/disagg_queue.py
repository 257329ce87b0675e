"""The disaggregated pools' queues (docs/serving.md) against discrete-event simulations.

    PYTHONPATH=service:. python -m bench.serving.disagg_queue [--requests 20000]

Two checks, each on the speed model's own step function of a real plan (the first case
of ``bench.serving.queue_sim``: Llama 3.1 70B on 2 x H200, 2,048 in / 512 out):

- **Decode pool.** ``under_load(..., serial_prompts=False)`` against the engine's
  scheduler simulated step by step (``queue_sim.simulate``) with pure decode steps and a
  one-token "prompt" (the cache arrives prefilled and joins the next step): TTFT (the
  admission wait and the first step) and TPOT at p50/p95/p99.
- **Prefill pool.** ``prefill_pool_wait`` plus the configured batch's time against a
  replica that runs, whenever it is free, the waiting prompts (up to ``batch``) as one
  batch of the step function's time for their tokens.

The decode pool's model is the engine queue's; the prefill pool's times a prompt's own
batch at the prompts that arrive during one full batch (between one and the batch), a
mean where the real batch varies with the queue: below saturation larger batches read
high (the summary gives the least error, the most optimistic reading).
Writes ``bench/results/disagg_queue.json``.
"""

import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.serving.queue_sim import CASES, _quantiles, cli, replica_of, simulate
from gpuplan.core.perf.queueing import (
    Scheduler,
    StepFn,
    StepTable,
    prefill_pool_wait,
    saturation_rate,
    under_load,
)

RESULTS = Path(__file__).resolve().parents[1] / "results" / "disagg_queue.json"

LOADS = (0.3, 0.6, 0.8, 0.9)
BATCHES = (1, 2, 4)
CASE = next(iter(CASES))


def decode_rows(
    step: StepFn, cap: int, output_tokens: int, requests: int, seed: int
) -> list[dict[str, Any]]:
    """The decode pool's model and simulation at each load."""
    sched = Scheduler(cap=cap, budget=cap + 1, prompt_tokens=1, output_tokens=output_tokens)

    def pure(n: float, _p: float) -> float:
        return step(max(n, 1.0), 0.0)

    table = StepTable(pure, sched)
    sat = saturation_rate(table)
    rows = []
    for load in LOADS:
        rate = load * sat
        model = under_load(table, rate, serial_prompts=False)
        sim = simulate(pure, sched, rate, requests, seed)
        row: dict[str, Any] = {"pool": "decode", "cap": cap, "load": load}
        for figure, got in (("ttft_s", model.ttft_s), ("tpot_s", model.tpot_s)):
            for q, m, x in zip(("p50", "p95", "p99"), got, _quantiles(sim[figure]), strict=True):
                row[f"{figure}_{q}_model"] = round(m, 5)
                row[f"{figure}_{q}_sim"] = round(x, 5)
                row[f"{figure}_{q}_error"] = round(m / x - 1, 4)
        rows.append(row)
    return rows


def simulate_prefill(
    batch_step: Callable[[int], float], batch: int, rate: float, requests: int, seed: int
) -> list[float]:
    """Arrival to the end of the prompt's batch, for every request after the warm-up."""
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    for _ in range(requests):
        t += rng.expovariate(rate)
        arrivals.append(t)
    free, i = 0.0, 0
    out: list[float] = []
    while i < requests:
        start = max(free, arrivals[i])
        j = i
        while j < requests and j - i < batch and arrivals[j] <= start:
            j += 1
        end = start + batch_step(j - i)
        out.extend(end - arrivals[r] for r in range(i, j))
        free, i = end, j
    return out[requests // 10 :]


def prefill_rows(
    step: StepFn, prompt_tokens: int, requests: int, seed: int
) -> list[dict[str, Any]]:
    """The prefill pool's model (its wait plus the batch) and simulation."""

    def batch_step(b: int) -> float:
        return step(0.0, float(b * prompt_tokens))

    rows = []
    for batch in BATCHES:
        seconds = batch_step(batch)
        for load in LOADS:
            rate = load * batch / seconds
            pw = prefill_pool_wait(rate, seconds, batch, batch_step(1))
            sim = _quantiles(simulate_prefill(batch_step, batch, rate, requests, seed))
            row: dict[str, Any] = {"pool": "prefill", "batch": batch, "load": load}
            for q, w, x in zip(("p50", "p95", "p99"), pw.wait_s, sim, strict=True):
                row[f"ttft_s_{q}_model"] = round(w + pw.batch_s, 5)
                row[f"ttft_s_{q}_sim"] = round(x, 5)
                row[f"ttft_s_{q}_error"] = round((w + pw.batch_s) / x - 1, 4)
            rows.append(row)
    return rows


def run(requests: int = 20_000, seed: int = 1) -> dict[str, Any]:
    step, sched = replica_of(CASES[CASE])
    rows = decode_rows(step, sched.cap, sched.output_tokens, requests, seed)
    rows += prefill_rows(step, sched.prompt_tokens, requests, seed)
    for row in rows:
        print(
            f"{row['pool']:<7} {'cap ' + str(row['cap']) if 'cap' in row else 'batch ' + str(row['batch']):<9} "
            f"load {row['load']:.2f}: TTFT p50/p95/p99 err "
            + " ".join(f"{row[f'ttft_s_{q}_error']:+.0%}" for q in ("p50", "p95", "p99"))
            + (
                "  TPOT "
                + " ".join(f"{row[f'tpot_s_{q}_error']:+.0%}" for q in ("p50", "p95", "p99"))
                if "tpot_s_p50_error" in row
                else ""
            )
        )
    p95 = [r for r in rows if r["load"] <= 0.8]
    summary = {
        "decode_ttft_p95_median_abs_error_to_0.8": round(
            statistics.median(abs(r["ttft_s_p95_error"]) for r in p95 if r["pool"] == "decode"), 4
        ),
        "decode_tpot_p95_median_abs_error_to_0.8": round(
            statistics.median(abs(r["tpot_s_p95_error"]) for r in p95 if r["pool"] == "decode"), 4
        ),
        "prefill_batch1_ttft_p95_median_abs_error_to_0.8": round(
            statistics.median(
                abs(r["ttft_s_p95_error"])
                for r in p95
                if r["pool"] == "prefill" and r["batch"] == 1
            ),
            4,
        ),
        "prefill_ttft_p95_least_error": round(
            min(r["ttft_s_p95_error"] for r in rows if r["pool"] == "prefill"), 4
        ),
    }
    return {"case": CASE, "requests": requests, "seed": seed, "rows": rows, "summary": summary}


def main() -> None:
    cli(__doc__, run, RESULTS)


if __name__ == "__main__":
    main()
