"""One GPU of a serving replica as its engine fills it: the weights, what is not KV
cache, and the KV cache the engine's rule leaves.

Its own module because the request's memory oracle (:mod:`gpuplan.core.recommend.fit`)
memoizes it, and the serving search (:mod:`gpuplan.core.recommend.serving`) builds it:
both import it, neither imports the other for it.
"""

import math
from typing import NamedTuple

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.memory.response_records import Measures
from gpuplan.core.memory.schema import EstimateResponse, Workload
from gpuplan.core.recommend.engine import (
    Fits,
    default_fraction,
    default_max_concurrency,
    engine_memory,
    graph_batch,
    token_budget,
    whole_blocks,
)
from gpuplan.core.recommend.engine_records import EngineSpec
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.mla import latent_kv_bytes_per_token


class Profile(NamedTuple):
    """The estimate of the engine's profile step on one GPU: one forward of the step's
    token budget (what vLLM's ``profile_run`` and TensorRT-LLM's dummy requests do)."""

    non_kv_bytes: float
    """Everything but the KV cache at its peak: weights, activations, workspaces, the
    allocator's cache, the CUDA context and NCCL."""

    activation_bytes: float
    """Its activations and temporaries (what a CUDA graph of fewer tokens scales from)."""

    tokens: int


class ReplicaMemory(NamedTuple):
    """One GPU of a replica as its engine fills it: the weights, what is not KV cache,
    and the KV cache the engine's rule leaves (``engine.py``)."""

    weights_bytes: float
    """What a decode step reads besides the KV cache."""

    static_bytes: float
    """Weights, runtime, activations at the engine's profile peak, CUDA graphs:
    everything but the KV cache."""

    per_token_bytes: float
    """KV cache of one token of one sequence on this GPU."""

    kv_budget_bytes: float
    """The KV cache the engine's rule leaves on this GPU."""

    mean_tokens: int
    """Tokens a sequence in flight holds on average: its prompt and half its output,
    in whole blocks (a static cache: its full length)."""

    full_tokens: int
    """Tokens of a finished sequence (prompt + output)."""

    estimate_bytes: int
    """The estimator's ``required_bytes`` (``device_bytes`` with the planning headroom) of
    the workload as written: what decides the fit, as it does for a CI plan's ``fits``."""

    block_tokens: int = 1
    """Tokens per KV-cache block of the engine."""

    fraction: float | None = None
    """The engine's memory share the plan sets (None: a static engine)."""

    token_budget: int = 0
    """Tokens one engine step takes at most (the profile's)."""

    graph_tokens: int = 0
    """Tokens of the largest decode CUDA graph the memory counts."""

    runtime_bytes: float = 0.0
    """Memory outside torch: the CUDA context and NCCL."""

    notes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        job: Job,
        w: Workload,
        gpu: GpuSpec,
        *,
        spec: EngineSpec,
        tp: int,
        measures: Measures,
        base: EstimateResponse,
        profile: Profile | None,
    ) -> "ReplicaMemory":
        """From the estimate of ``w.batch_size`` sequences of ``prompt + output`` tokens
        and, for a paged engine, of its profile step."""
        full = job.prompt_tokens + job.output_tokens
        block = spec.kv_block_tokens
        kv = base.breakdown.kv_cache_bytes
        weights = float(base.breakdown.weights_bytes)
        runtime = float(measures.context + measures.nccl)
        per_token = kv / (w.batch_size * full) if full else 0.0
        if spec.paged:  # a paged engine caches MLA's latent, not the decompressed heads
            per_token = latent_kv_bytes_per_token(job.arch, w) or per_token
        iv = job.inference
        budget = token_budget(spec, gpu, iv.max_batched_tokens, job.prompt_tokens * w.batch_size)
        notes: list[str] = []
        if not spec.paged:
            # No engine share: the estimate (with its planning headroom) is the rule.
            static = float(measures.required - kv)
            return cls(
                weights_bytes=weights,
                static_bytes=static,
                per_token_bytes=per_token,
                kv_budget_bytes=gpu.usable_memory_bytes - static,
                mean_tokens=full,
                full_tokens=full,
                estimate_bytes=measures.required,
                block_tokens=block,
                token_budget=budget,
                runtime_bytes=runtime,
            )
        cap = iv.max_concurrency or default_max_concurrency(gpu)
        graphs = graph_batch(spec, gpu, tp, cap, iv.max_concurrency)
        if profile is not None:
            logits = 0.0
            if spec.profile_logits and job.arch is not None:
                # The sampler's rows beyond the one the estimate's prefill keeps: fp32
                # logits over the whole vocabulary (gathered on every rank).
                rows = min(profile.tokens, max(cap, 1)) - 1
                act = 4 if w.precision == "fp32" else 2
                logits = float(rows * job.arch.vocab_size * (act + 4))
            graph = profile.activation_bytes * graphs / max(profile.tokens, 1)
            non_kv = profile.non_kv_bytes + logits
        else:
            # No shape to profile: what the estimate of one request holds beside its cache.
            graph = 0.0
            non_kv = float(measures.device - kv)
            notes.append(
                f"{iv.engine}'s profile step was not estimated (the model has no "
                "shape, or the estimator refused the step): the KV cache is what one "
                "request's estimate leaves"
            )
        fraction = iv.memory_fraction or default_fraction(spec, gpu, tp, budget, graphs)
        em = engine_memory(
            spec,
            gpu,
            fraction=fraction,
            weights=weights,
            runtime=runtime,
            non_kv=non_kv,
            graph=graph,
        )
        if em.reserve_note:
            notes.append(em.reserve_note)
        return cls(
            weights_bytes=weights,
            static_bytes=em.static_bytes,
            per_token_bytes=per_token,
            kv_budget_bytes=em.kv_budget_bytes,
            mean_tokens=whole_blocks(job.prompt_tokens + job.output_tokens / 2, block),
            full_tokens=full,
            estimate_bytes=measures.required,
            block_tokens=block,
            fraction=em.fraction,
            token_budget=budget,
            graph_tokens=graphs,
            runtime_bytes=runtime,
            notes=tuple(notes),
        )

    @property
    def sequences(self) -> int | None:
        """Sequences in flight the cache holds at their mean length; None for a model
        whose cache is not known (a bare parameter count)."""
        if self.per_token_bytes <= 0:
            return None
        return max(int(self.kv_budget_bytes // (self.per_token_bytes * self.mean_tokens)), 0)

    def resident(self, sequences: int, *, static_batch: bool) -> int:
        """Bytes per GPU with ``sequences`` in flight (a static batch holds every
        sequence at its full length)."""
        tokens = self.full_tokens if static_batch else self.mean_tokens
        return math.ceil(self.static_bytes + sequences * tokens * self.per_token_bytes)

    def fits_length(self, sequences: int = 1) -> Fits:
        """Whether ``sequences`` sequences of a length fit the KV budget."""
        return Fits(self.kv_budget_bytes, self.per_token_bytes, self.block_tokens, sequences)
