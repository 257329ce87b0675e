"""How each serving engine fills a GPU: its share, what it keeps outside the KV cache,
and its defaults for the sequence cap and the tokens of one step.

The rules are the engines' own, read from their source (``data/engines.toml`` cites the
file and version of each; docs/serving.md walks through them):

- **vLLM** takes ``total x gpu_memory_utilization`` and gives the KV cache what is left
  after the weights, the peak of a profile run of ``max_num_batched_tokens`` tokens (and
  the sampler's fp32 logits of ``min(tokens, max_num_seqs)`` rows), the memory outside
  torch, and the CUDA-graph pool.
- **SGLang** gives the KV pool ``free before the model loads x mem_fraction_static``
  less the weights; the rest (``1 - mem_fraction_static``) is for activations and CUDA
  graphs, and its default fraction is a rule of the GPU's memory, the chunked-prefill
  size, the tensor-parallel degree and the decode graphs' batch.
- **TensorRT-LLM** runs a profile step, then gives the KV cache
  ``free_gpu_memory_fraction`` of what is free after it.
- **transformers** and **compiled** (gpt-fast) keep no paged pool: each sequence holds a
  cache of its full length, and the estimator's own answer (with its planning headroom)
  decides the fit.

Everything here is a pure function of the data, the GPU and the plan's values.
"""

import math
import re
import tomllib
from functools import cache
from importlib import resources

import msgspec

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.presets import presets
from gpuplan.core.memory.schema import ModelSpec
from gpuplan.core.perf.efficiency import efficiency_data
from gpuplan.core.recommend.engine_records import (
    MIB,
    EngineMemory,
    EnginesData,
    EngineSpec,
    SglangTier,
)
from gpuplan.core.recommend.schema import Engine, InferenceVolume


@cache
def engines_data() -> EnginesData:
    """The shipped data, validated at load: every engine once, every flag a plan uses."""
    text = resources.files("gpuplan.core.recommend.data").joinpath("engines.toml")
    data = msgspec.convert(tomllib.loads(text.read_text("utf-8")), EnginesData)
    for name, spec in data.engines.items():
        needed = {"model"} | (
            {"tensor_parallel", "memory_fraction", "max_model_len", "max_concurrency"}
            | {"token_budget"}
            if spec.paged
            else set()
        )
        if missing := needed - set(spec.flags):
            raise ValueError(f"engines.toml: {name} lacks the flags {sorted(missing)}")
        if spec.memory_rule == "of_free_before_load" and not spec.tiers:
            raise ValueError(f"engines.toml: {name} needs its tiers")
    return data


def engine_spec(name: Engine) -> EngineSpec:
    return engines_data().engines[name]


def _tier(spec: EngineSpec, gpu: GpuSpec) -> SglangTier:
    mib = gpu.usable_memory_bytes / MIB
    return next(t for t in spec.tiers if mib < t.below_mib)


def large_gpu(gpu: GpuSpec) -> bool:
    """Whether vLLM gives ``gpu`` its larger defaults (``efficiency.toml``'s
    ``[serving]``): enough memory, and no excluded word in its id. Compiled (mypyc
    turns ``all()`` of a generator into a loop): a serving search asks it hundreds of
    times."""
    s = efficiency_data().serving
    return gpu.usable_memory_bytes >= s.large_gpu_min_memory_bytes and all(
        word not in gpu.id for word in s.large_gpu_excludes
    )


def default_max_concurrency(gpu: GpuSpec) -> int:
    """vLLM's default sequence cap (``max_num_seqs``) on ``gpu``."""
    s = efficiency_data().serving
    return s.large_gpu_max_sequences if large_gpu(gpu) else s.max_sequences


def default_token_budget(gpu: GpuSpec) -> int:
    """vLLM's default tokens a step (``max_num_batched_tokens``) on ``gpu``."""
    s = efficiency_data().serving
    return s.large_gpu_max_batched_tokens if large_gpu(gpu) else s.max_batched_tokens


def token_budget(spec: EngineSpec, gpu: GpuSpec, given: int | None, batch_tokens: int) -> int:
    """Tokens one step takes at most: the request's, else the engine's default for the
    GPU (a static engine's step is its whole batch's prompts)."""
    if spec.budget_default == "batch":
        return max(batch_tokens, 1)
    if given is not None:
        return given
    if spec.budget_default == "sglang_tiers":
        return _tier(spec, gpu).chunked_prefill_size
    return default_token_budget(gpu)


def graph_batch(spec: EngineSpec, gpu: GpuSpec, tp: int, cap: int, given: int | None) -> int:
    """Sequences the largest decode CUDA graph holds (0: none captured). vLLM: up to
    ``min(2 x max_num_seqs, 512)`` tokens; SGLang: its tier's ``max_bs``, lowered only to
    a ``max_running_requests`` the request gives (``given``)."""
    if spec.tiers:
        tier = _tier(spec, gpu)
        graphs = tier.graph_max_bs_tp4 if tp >= spec.graph_tp4_from else tier.graph_max_bs
        return min(graphs, given) if given is not None else graphs
    if spec.graph_max_tokens:
        return min(spec.graph_tokens_per_sequence * cap, spec.graph_max_tokens)
    return 0


def default_fraction(spec: EngineSpec, gpu: GpuSpec, tp: int, budget: int, graphs: int) -> float:
    """The share a plan sets when the request gives none. SGLang's own rule
    (``handle_gpu_memory_settings``): what its activation and graph reserve leaves of
    the GPU, rounded to 3 decimals."""
    if spec.memory_rule != "of_free_before_load":
        assert spec.memory_fraction is not None
        return spec.memory_fraction
    mib = gpu.usable_memory_bytes / MIB
    reserved = (
        spec.reserve_base_mib
        + spec.reserve_mib_per_activation_token * max(budget, spec.reserve_min_activation_tokens)
        + tp / 8 * spec.reserve_mib_per_eighth_of_tp
        + spec.reserve_mib_per_graph_batch * graphs
    )
    if mib > spec.reserve_floor_above_mib:
        reserved = max(reserved, spec.reserve_floor_mib)
    return round(max((mib - reserved) / mib, 0.0), 3)


def engine_memory(
    spec: EngineSpec,
    gpu: GpuSpec,
    *,
    fraction: float | None,
    weights: float,
    runtime: float,
    non_kv: float,
    graph: float,
) -> EngineMemory:
    """The KV budget by the engine's rule, from the estimate's parts on this GPU.

    ``weights``: the replica's weights per GPU; ``runtime``: memory outside torch (the
    CUDA context, NCCL); ``non_kv``: everything but the KV cache at the engine's profile
    peak (weights, runtime, activations, workspaces, the allocator's cache); ``graph``:
    the CUDA-graph pool.
    """
    total = float(gpu.usable_memory_bytes)
    static = non_kv + graph
    if spec.memory_rule == "of_total":
        assert fraction is not None
        return EngineMemory(
            fraction=fraction, static_bytes=static, kv_budget_bytes=total * fraction - static
        )
    if spec.memory_rule == "of_free_after_profile":
        assert fraction is not None
        return EngineMemory(
            fraction=fraction, static_bytes=static, kv_budget_bytes=(total - static) * fraction
        )
    if spec.memory_rule == "of_free_before_load":
        assert fraction is not None
        free_before = total - runtime
        reserve = free_before * (1 - fraction)
        needed = static - weights - runtime
        note = (
            f"SGLang's reserve, {reserve / 2**30:.1f} GiB (1 - mem_fraction_static of the "
            f"memory free before the model loads), is under the {needed / 2**30:.1f} GiB of "
            "activations and CUDA graphs estimated: lower --mem-fraction-static"
            if needed > reserve
            else None
        )
        return EngineMemory(
            fraction=fraction,
            static_bytes=static,
            kv_budget_bytes=free_before * fraction - weights,
            reserve_note=note,
        )
    return EngineMemory(fraction=None, static_bytes=static, kv_budget_bytes=total - static)


def sequence_cap(
    spec: EngineSpec, gpu: GpuSpec, *, given: int | None, batch: int, pool_tokens: int, length: int
) -> int:
    """Sequences one replica may keep in flight: the request's, else the engine's
    default (SGLang's comes from its pool: ``resolve_max_num_reqs``)."""
    if spec.cap_default == "batch":
        return batch
    if given is not None:
        return given
    if spec.cap_default == "sglang_pool":
        if pool_tokens <= 0:  # a model whose cache is not known: SGLang's floor
            return spec.pool_requests_min
        estimated = int(pool_tokens / max(length, 1) * spec.pool_requests_per_context)
        estimated = max(min(estimated, spec.pool_requests_max), spec.pool_requests_min)
        return max(min(estimated, pool_tokens // 2), 1)
    return default_max_concurrency(gpu)


def whole_blocks(tokens: float, block: int) -> int:
    """``tokens`` rounded up to whole cache blocks."""
    return math.ceil(tokens / block) * block


def longest_fitting(fits: "Fits", *, block: int, low: int, high: int) -> int:
    """The longest length, in whole blocks, from ``low`` to ``high`` that ``fits``
    (monotone: a longer sequence never fits where a shorter does not); 0 when even
    ``low`` does not. A bisection: any memory rule, however the cache grows with the
    length, is searched the same way."""
    if high < low or not fits(low):
        return 0
    if fits(high):
        return high
    lo, hi = low // block, high // block  # lo fits (low is a whole number of blocks)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid * block):
            lo = mid
        else:
            hi = mid
    return lo * block


class Fits:
    """Whether ``sequences`` sequences of a length fit a KV budget, in whole blocks (the
    engine's rule for ``max_model_len``: vLLM refuses to start when its cache cannot hold
    one sequence of it; a static cache holds its whole batch at that length)."""

    def __init__(
        self, kv_budget_bytes: float, per_token_bytes: float, block: int, sequences: int = 1
    ) -> None:
        self.budget = kv_budget_bytes
        self.per_token = per_token_bytes
        self.block = block
        self.sequences = sequences

    def tokens(self) -> int:
        """Tokens the budget holds, in whole blocks."""
        if self.per_token <= 0:
            return 0
        return max(int(self.budget // (self.per_token * self.block)), 0) * self.block

    def __call__(self, length: int) -> bool:
        need = whole_blocks(length, self.block) * self.per_token * self.sequences
        return need <= self.budget


def kubernetes_resource(gpu: GpuSpec) -> str:
    return engines_data().kubernetes[gpu.vendor]


CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""Keys of a Hugging Face config.json that bound the model's context: vLLM takes the
smallest it finds, and ``model_max_length`` over all (vLLM 0.34.0,
vllm/transformers_utils/model_arch_config_convertor.py, derive_max_model_len_and_key)."""


def model_context(config: dict[str, object] | None) -> int | None:
    """The model's own longest sequence, from its config.json (its ``text_config``'s for
    a multimodal one), as vLLM derives it; None when the config says none."""
    if not config:
        return None
    text = config.get("text_config")
    source = text if isinstance(text, dict) else config
    lengths = [
        v
        for k in CONTEXT_KEYS
        if isinstance(v := source.get(k), int) and not isinstance(v, bool) and v > 0
    ]
    override = source.get("model_max_length")
    if isinstance(override, int) and not isinstance(override, bool) and override > 0:
        return override
    return min(lengths) if lengths else None


PLACEHOLDER_MODEL = "MODEL"
"""What a launch command loads when the request names no path and the model no repo."""


def model_source(spec: ModelSpec) -> tuple[dict[str, object] | None, str | None]:
    """The model's config.json and the Hugging Face repo it comes from, when known: a
    preset's source names its repo (``meta-llama/Llama-3.1-70B config.json``), an
    ``hf_config`` may carry ``_name_or_path``."""
    if spec.hf_config is not None:
        name = spec.hf_config.get("_name_or_path")
        repo = name if isinstance(name, str) and _repo_like(name) else None
        return dict(spec.hf_config), repo
    if spec.name is not None and (preset := presets().get(spec.name.lower())) is not None:
        words = preset.source.split()
        repo = words[0] if len(words) > 1 and words[1].startswith("config.json") else None
        return preset.config, repo if repo and _repo_like(repo) else None
    return None, None


def _repo_like(name: str) -> bool:
    """``org/name``: what an engine resolves on the Hugging Face hub."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and " " not in name


def engine_errors(
    iv: InferenceVolume,
    *,
    full_tokens: int,
    context: int | None,
    given_tp: int | None,
    batch_size: int,
) -> list[tuple[str, str]]:
    """What the engine cannot run as asked (each a field path and why)."""
    errors: list[tuple[str, str]] = []
    spec = engine_spec(iv.engine)
    if not spec.paged and batch_size > 1:
        errors.append(
            (
                "$.workload.batch_size",
                f"{iv.engine} decodes one sequence at a time (no batching flag in its "
                "launch command)",
            )
        )
    if not spec.paged:
        for name in ("memory_fraction", "max_batched_tokens", "max_concurrency"):
            if getattr(iv, name) is not None:
                errors.append(
                    (
                        f"$.inference.{name}",
                        f"{iv.engine} keeps no paged KV cache and no memory share: it "
                        "decodes one sequence at a time",
                    )
                )
    if not iv.mixed_chunk and iv.engine != "sglang":
        errors.append(
            (
                "$.inference.mixed_chunk",
                f"only SGLang runs prefill batches apart from decodes; {iv.engine} mixes "
                "prompt chunks into its steps",
            )
        )
    limit = spec.max_tensor_parallel
    if limit is not None and given_tp is not None and given_tp > limit:
        errors.append(
            (
                "$.workload.parallelism.tensor",
                f"{iv.engine} serves a model on {limit} GPU (transformers serve has no "
                "tensor parallelism)",
            )
        )
    if isinstance(iv.max_model_len, int):
        if iv.max_model_len < full_tokens:
            errors.append(
                (
                    "$.inference.max_model_len",
                    f"{iv.max_model_len} is shorter than a request (prompt + output: "
                    f"{full_tokens} tokens)",
                )
            )
        if context is not None and iv.max_model_len > context:
            errors.append(
                (
                    "$.inference.max_model_len",
                    f"{iv.max_model_len} is longer than the model's context, {context} tokens "
                    "(its config.json)",
                )
            )
    return errors


def needed_total(
    spec: EngineSpec,
    *,
    fraction: float | None,
    static: float,
    weights: float,
    runtime: float,
    kv: float,
) -> float:
    """The GPU memory on which the engine's rule leaves ``kv`` bytes of KV cache: what a
    plan that does not fit would need."""
    if spec.memory_rule == "of_total" and fraction:
        return (static + kv) / fraction
    if spec.memory_rule == "of_free_after_profile" and fraction:
        return static + kv / fraction
    if spec.memory_rule == "of_free_before_load" and fraction:
        return (weights + kv) / fraction + runtime
    return static + kv


def _version(text: str) -> tuple[int, ...]:
    """``0.3.0`` as (0, 3, 0); the leading digits of each dot-separated part."""
    parts = []
    for part in text.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def step_factor(spec: EngineSpec, version: str | None) -> float:
    """A step's time over its GPU time for ``version`` of the engine: above 1 when the
    version's scheduler runs in series with the GPU (SGLang before 0.4; the SGLang v0.4
    release measured its overlapped scheduler 1.1x faster than the one before). An
    unnamed version is the source's, which overlaps."""
    if spec.overlap_from_version is None or version is None:
        return 1.0
    named = _version(version)
    if not named or named >= _version(spec.overlap_from_version):
        return 1.0
    return spec.serial_step_factor
