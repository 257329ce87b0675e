"""Measured kernel tables for the speed model, derived from NVIDIA AIConfigurator's data.

    python -m bench.kernels.derive --data /path/to/aiconfigurator_core/systems/data

AIConfigurator's data package (``aiconfigurator-core`` 0.12.0, Apache-2.0, on PyPI)
ships, per GPU and serving engine, latencies measured on the GPU: GEMMs by ``m, n, k``
and dtype, context (prefill) attention and generation (decode) attention. This script
reads those parquet files (pyarrow: a bench-only dependency, ``pip install pyarrow``)
and writes a compact grid per GPU into the package,
``service/gpuplan/core/perf/data/kernels/<gpu>.json``, so the service reads JSON and
never needs pandas, pyarrow or the 80 MB wheel. Each file names where every number came
from: the package and version, the file inside the wheel, the engine and its version,
the device string the collector recorded, and the collection's own metadata.

What is kept (and why):

- GEMM, ``bfloat16`` and per-tensor ``fp8`` (what a bf16 or a torchao/Transformer
  Engine fp8 job runs), on a log grid: ``m`` in powers of 4 up to 64 then powers of 2
  (tokens: decode batches to long prefill chunks), ``n`` and ``k`` on the widths models
  use. Latency in microseconds, 4 significant digits.
- Context attention at head size 128, bf16, no sliding window: the latency of a batch of
  causal prompts by (``batch x heads``, prompt length), the geometric mean over the
  heads/KV-heads splits measured at that product (the kernel is parallel over both).
- Generation attention at head size 128, bf16 KV cache, no window: by
  (``batch x KV heads``, context length), the geometric mean over the query-head
  splits (a decode step reads each KV head's cache once).

A grid cell the collection did not measure (it skips the largest shapes) is filled from
its nearest measured neighbour by the roofline (time proportional to work) and counted
in ``filled_cells``. The GEMM latencies are then made non-decreasing along ``m``, ``n``
and ``k`` (a smaller GEMM can run a larger one's kernel, padded; the collection's
smallest shapes sometimes chose a slower kernel than their larger neighbour), and the
lowered cells are counted in ``enveloped_cells``.

Also writes ``tests/fixtures/kernels_points.json``: a few source rows exactly as the
parquet holds them, which the tests check the interpolation against at grid points.
"""

import argparse
import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "service" / "gpuplan" / "core" / "perf" / "data" / "kernels"
FIXTURE = ROOT / "tests" / "fixtures" / "kernels_points.json"
PACKAGE, VERSION = "aiconfigurator-core", "0.12.0"
WHEEL = "aiconfigurator_core-0.12.0-cp311-abi3-manylinux_2_28_x86_64.whl"
INSIDE = "aiconfigurator_core/systems/data"

GPUS: dict[str, list[str]] = {
    # AIConfigurator's folder -> catalog ids the same silicon, clocks and memory serve.
    "a100_sxm": ["a100-sxm4-80gb"],
    "h100_sxm": ["h100-sxm5-80gb"],
    "h200_sxm": ["h200-sxm-141gb"],
    "b200_sxm": ["b200-180gb"],
    "b300_sxm": ["b300-288gb"],
    "gb200": ["gb200-186gb"],
    "gb300": ["gb300-288gb"],
    "l40s": ["l40s-48gb"],
    "rtx_pro_6000_server": ["rtx-pro-6000-server-96gb"],
}
ENGINES = ("trtllm", "vllm", "sglang")
"""Preference: TensorRT-LLM's collection is the fullest; the others where it is absent."""

M_GRID = [1, 4, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
NK_GRID = [128, 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 65536]
DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
UNITS_GRID = [2**i for i in range(0, 13)]
ISL_GRID = [16, 64, 256, 1024, 2048, 4096, 8192, 16384]
CONTEXT_GRID = [2**i for i in range(1, 18)]
HEAD_DIM = 128


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _version_dirs(base: Path, op: str, table: str) -> list[tuple[str, str, Path]]:
    found = []
    for engine in ENGINES:
        root = base / op / engine
        if not root.is_dir():
            continue
        for v in sorted(root.iterdir(), reverse=True):
            if (v / f"{table}.parquet").is_file():
                found.append((engine, v.name, v))
                break
    return found


def _meta(path: Path) -> dict[str, Any]:
    text = (path / "collection_meta.yaml").read_text("utf-8")
    meta = yaml.safe_load(text)
    return {"provenance": meta.get("provenance"), "runtime": meta.get("runtime")}


def _rows(path: Path) -> dict[str, list[Any]]:
    import pyarrow.parquet as pq  # bench-only dependency

    return pq.read_table(path).to_pydict()  # type: ignore[no-any-return]


def _gemm(path: Path) -> tuple[dict[str, Any], tuple[int, int], list[dict[str, Any]], str]:
    t = _rows(path / "gemm_perf.parquet")
    by: dict[tuple[str, int, int, int], float] = {}
    for d, m, n, k, lat in zip(t["gemm_dtype"], t["m"], t["n"], t["k"], t["latency"], strict=True):
        if d in DTYPES:
            by[(DTYPES[d], m, n, k)] = lat * 1000.0  # ms -> us
    out: dict[str, Any] = {}
    filled = enveloped = 0
    points: list[dict[str, Any]] = []
    for dtype in sorted({key[0] for key in by}):
        ms = [m for m in M_GRID if any((dtype, m, n, k) in by for n in NK_GRID for k in NK_GRID)]
        ns = [n for n in NK_GRID if any((dtype, m, n, k) in by for m in ms for k in NK_GRID)]
        ks = [k for k in NK_GRID if any((dtype, m, n, k) in by for m in ms for n in ns)]
        lat: list[float] = []
        source: list[float | None] = []
        for m in ms:
            for n in ns:
                for k in ks:
                    v = by.get((dtype, m, n, k))
                    source.append(v)
                    if v is None:
                        v = _fill_gemm(by, dtype, m, n, k, ms)
                        filled += 1
                    lat.append(v)
        changed = _envelope(lat, (len(ms), len(ns), len(ks)))
        enveloped += changed
        for i, m in enumerate(ms):
            for j, n in enumerate(ns):
                for kk, k in enumerate(ks):
                    cell = (i * len(ns) + j) * len(ks) + kk
                    v = source[cell]
                    if v is not None and v == lat[cell] and (m, n, k) in FIXTURE_SHAPES:
                        points.append(
                            {
                                "kind": "gemm",
                                "dtype": dtype,
                                "m": m,
                                "n": n,
                                "k": k,
                                "latency_ms": v / 1000,
                            }
                        )
        out[dtype] = {"m": ms, "n": ns, "k": ks, "latency_us": [_sig(v) for v in lat]}
    return out, (filled, enveloped), points, t["device"][0]


FIXTURE_SHAPES = {(64, 4096, 4096), (4096, 4096, 4096), (16, 1024, 8192), (1024, 8192, 3072)}


def _envelope(lat: list[float], shape: tuple[int, int, int]) -> int:
    """Make the latency non-decreasing along every axis, in place, and count the cells
    lowered: a GEMM no larger than another can always run the larger one's kernel on
    padded operands, so it never takes longer. The collection's small shapes (a few to
    a few hundred rows, where the latency is a launch and one wave) sometimes chose a
    slower kernel than a larger neighbour's; the envelope takes the faster."""
    a, b, c = shape
    changed: set[int] = set()
    strides = (b * c, c, 1)
    for axis, length in enumerate(shape):
        stride = strides[axis]
        for start in range(a * b * c):
            if (start // stride) % length != length - 1:
                continue  # walk each line from its top end
            best = math.inf
            for step in range(length):
                cell = start - step * stride
                if lat[cell] > best:
                    lat[cell] = best
                    changed.add(cell)
                best = min(best, lat[cell])
    return len(changed)


def _fill_gemm(
    by: dict[tuple[str, int, int, int], float], dtype: str, m: int, n: int, k: int, ms: list[int]
) -> float:
    """The nearest measured cell (in log distance over ``m, n, k``; the collection skips
    the largest shapes), scaled by the roofline: time in proportion to each dimension
    above it, the same time below it (a latency floor)."""
    near = min(
        (sum(abs(math.log(a / b)) for a, b in ((x, m), (y, n), (z, k))), x, y, z)
        for (d, x, y, z) in by
        if d == dtype
    )
    _, x, y, z = near
    return by[(dtype, x, y, z)] * max(1.0, m / x) * max(1.0, n / y) * max(1.0, k / z)


def _attention(
    path: Path, table: str, first: str, second_grid: list[int]
) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    t = _rows(path / f"{table}.parquet")
    cells: dict[tuple[int, int], list[float]] = defaultdict(list)
    raw: dict[tuple[int, int], list[dict[str, Any]]] = defaultdict(list)
    generation = table.startswith("generation")
    for i in range(len(t["latency"])):
        if t["head_dim"][i] != HEAD_DIM or t["window_size"][i] != 0:
            continue
        if t["kv_cache_dtype"][i] != "bfloat16" or t["attn_dtype"][i] != "bfloat16":
            continue
        if generation:
            units = t["batch_size"][i] * t["num_key_value_heads"][i]
            second = t["isl"][i] + t["step"][i]  # keys each decoded token attends to
        else:
            units = t["batch_size"][i] * t["num_heads"][i]
            second = t["isl"][i]
        if units in UNITS_GRID and second in second_grid:
            cells[(units, second)].append(t["latency"][i] * 1000.0)
            raw[(units, second)].append(
                {
                    c: t[c][i]
                    for c in (
                        "batch_size",
                        "isl",
                        "num_heads",
                        "num_key_value_heads",
                        "step",
                        "latency",
                    )
                }
            )
    us = [u for u in UNITS_GRID if any((u, s) in cells for s in second_grid)]
    ss = [s for s in second_grid if any((u, s) in cells for u in us)]
    lat, filled = [], 0
    for u in us:
        for s in ss:
            vals = cells.get((u, s))
            if vals:
                lat.append(_sig(math.exp(statistics.fmean(math.log(v) for v in vals))))
            else:
                near = sorted((abs(math.log(x / u)), x) for x in us if cells.get((x, s)))
                if not near:
                    raise ValueError(f"{table}: nothing measured at {ss} = {s}")
                x = near[0][1]
                base = math.exp(statistics.fmean(math.log(v) for v in cells[(x, s)]))
                lat.append(_sig(base * max(1.0, u / x)))
                filled += 1
    points = []
    for key in ((32, 1024), (64, 4096)) if not generation else ((8, 1024), (64, 4096)):
        if raw.get(key):  # the measured rows of a grid cell, as the parquet holds them
            points.append(
                {
                    "kind": table,
                    "units": key[0],
                    "second": key[1],
                    "latency_ms": [r["latency"] for r in raw[key]],
                }
            )
    return {first: us, "head_dim": HEAD_DIM, "second": ss, "latency_us": lat}, filled, points


def derive(data: Path) -> dict[str, Any]:
    fixture: dict[str, Any] = {}
    for folder, ids in GPUS.items():
        base = data / folder
        gemm_dirs = _version_dirs(base, "gemm", "gemm_perf")
        attn_dirs = _version_dirs(base, "attention", "context_attention_perf")
        if not gemm_dirs:
            continue
        engine, version, gpath = gemm_dirs[0]
        gemm, (gemm_filled, gemm_enveloped), points, device = _gemm(gpath)
        doc: dict[str, Any] = {
            "id": f"{PACKAGE} {VERSION}: {folder} {engine} {version}",
            "gpu": folder,
            "catalog_ids": ids,
            "device": device,
            "provenance": {
                "package": PACKAGE,
                "version": VERSION,
                "license": "Apache-2.0",
                "wheel": WHEEL,
                "gemm": {
                    "file": f"{INSIDE}/{folder}/gemm/{engine}/{version}/gemm_perf.parquet",
                    "engine": engine,
                    "engine_version": version,
                    "collection_meta": _meta(gpath),
                    "filled_cells": gemm_filled,
                    "enveloped_cells": gemm_enveloped,
                },
            },
            "units": "latency_us: microseconds per call on one GPU",
            "gemm": gemm,
        }
        if attn_dirs:
            a_engine, a_version, apath = attn_dirs[0]
            ctx, ctx_filled, p1 = _attention(
                apath, "context_attention_perf", "batch_heads", ISL_GRID
            )
            gen, gen_filled, p2 = _attention(
                apath, "generation_attention_perf", "batch_kv_heads", CONTEXT_GRID
            )
            doc["context_attention"] = ctx
            doc["generation_attention"] = gen
            doc["provenance"]["attention"] = {
                "files": [
                    f"{INSIDE}/{folder}/attention/{a_engine}/{a_version}/{name}.parquet"
                    for name in ("context_attention_perf", "generation_attention_perf")
                ],
                "engine": a_engine,
                "engine_version": a_version,
                "collection_meta": _meta(apath),
                "filled_cells": {"context": ctx_filled, "generation": gen_filled},
            }
            points += p1 + p2
        name = ids[0]
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n", "utf-8")
        fixture[name] = points
        print(
            f"{name}: {folder} gemm {engine} {version}, filled {gemm_filled}, enveloped {gemm_enveloped}; attention {attn_dirs[0][:2] if attn_dirs else None}"
        )
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n", "utf-8")
    return fixture


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--data",
        type=Path,
        default=Path("/tmp/aic/core") / INSIDE.split("/", 1)[0] / "systems" / "data",
    )
    derive(p.parse_args().data)


if __name__ == "__main__":
    main()
