"""Advice: concrete changes that make the job fit a GPU it does not fit, with effects.

For one GPU, the one asked about (``constraints.preferred_gpu``; a plan file's
``targets.fits.gpu``) or else the top recommendation's, when the job does not fit one
of it unsharded, each change is applied to the workload alone, its memory re-estimated
by the estimator and its time by the speed model, so the answer says not only *what*
to change but *what it buys and costs*: AMP or pure 16-bit weights, chunked
cross-entropy (``loss_chunks``), selective or full activation checkpointing, a smaller
micro-batch with gradient accumulation, an 8-bit optimizer, optimizer CPU offload,
LoRA or QLoRA, FP8 on GPUs with an FP8 path, weight quantization and a narrower KV
cache for inference, and sharding over more GPUs of the same model. When no single
change suffices, the cheapest combination of the job-preserving ones is tried.

A change that does not shrink the job's memory is not advice and is left out. The
rest are ranked (:func:`rank_advice`): what makes the job fit before what does not,
what keeps the job before LoRA and QLoRA (a different job), then the cheapest in
GPU-hours (a fitting change) or the largest saving (one that is not enough alone).
"""

import math

import msgspec

from gpuplan.core.catalog import Catalog, GpuSpec
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.schema import Workload
from gpuplan.core.memory.states import framework_of
from gpuplan.core.recommend.context import gpu_context
from gpuplan.core.recommend.context_record import GpuContext
from gpuplan.core.recommend.fit import MemoryOracle, with_layout
from gpuplan.core.recommend.job import Job
from gpuplan.core.recommend.option import objective_key
from gpuplan.core.recommend.schema import Advice, ParallelLayout, RecommendRequest
from gpuplan.core.recommend.serving import replica_memory, serve_option, serving_options
from gpuplan.core.recommend.training import time_training, training_options

ONE = ParallelLayout(tensor=1, pipeline=1, data=1, zero_stage=0)
OFFLOAD = ParallelLayout(tensor=1, pipeline=1, data=1, zero_stage=0, cpu_offload_optimizer=True)
GiB = 1 << 30

LOSS_CHUNKS = 8
"""Chunks of the advised chunked cross-entropy: torchtune's ``CEWithChunkedOutputLoss``
default (``num_output_chunks=8``)."""


class AdviceTarget(msgspec.Struct, frozen=True):
    """The GPU advice is for, and the sentence that says why that one."""

    gpu: GpuSpec | None
    why: str


def advice_target(request: RecommendRequest, catalog: Catalog, top: str | None) -> AdviceTarget:
    """``constraints.preferred_gpu`` when the request names one, else the GPU of the top
    recommendation (``top``, a catalog id): the GPU the user is looking at, never one
    nobody asked about (the cheapest per hour is a 24 GB card even for a 70B job)."""
    preferred = request.constraints.preferred_gpu
    if preferred is not None:
        gpu = catalog.lookup(preferred, "$.constraints.preferred_gpu")
        return AdviceTarget(gpu, f"advice is for {gpu.id} (constraints.preferred_gpu)")
    if top is None:
        return AdviceTarget(None, "no advice: no GPU to advise for")
    gpu = catalog.get(top)
    return AdviceTarget(
        gpu,
        f"advice is for {gpu.id}, the top recommendation's GPU; "
        "constraints.preferred_gpu chooses another",
    )


def advise(
    request: RecommendRequest,
    job: Job,
    *,
    oracle: MemoryOracle,
    contexts: dict[str, GpuContext],
    target: GpuSpec | None,
    trainable: int,
) -> list[Advice]:
    """The ranked changes that make the job fit one ``target`` (none when it fits)."""
    if target is None:
        return []
    ctx = contexts.get(target.id) or _context(target, job, request)
    if ctx.rate is None:
        return []
    before = oracle.required(job.workload, target)
    if before is None or before <= target.usable_memory_bytes:
        return []
    advisor = _Advisor(request, job, oracle=oracle, ctx=ctx, before=before, trainable=trainable)
    found = advisor.inference() if job.kind == "inference" else advisor.training()
    return rank_advice(found)


def rank_advice(advice: list[Advice]) -> list[Advice]:
    """Changes that shrink the job, each effect once, best first.

    A change whose memory is not below the job's as asked is dropped (FP8 under a
    recipe that keeps an fp32 master, checkpointing when the peak is the optimizer
    step). Two changes with the same effect (GPUs, memory, time) keep the better
    ranked. Order: fitting before not; keeping the job before changing it (LoRA,
    QLoRA); then fitting changes by GPU-hours, then by memory saved, and the others by
    memory saved, then by GPU-hours."""

    def key(a: Advice) -> tuple[int, bool, float, float, str]:
        saved = float(a.required_bytes_before - a.required_bytes_after)
        cost = a.gpu_hours_factor if a.gpu_hours_factor is not None else math.inf
        changes_job = "mode=finetune_" in a.change
        if a.fits_after:
            return (0, changes_job, cost, -saved, a.change)
        return (1, changes_job, -saved, cost, a.change)

    out: list[Advice] = []
    effects: set[tuple[int, int, float | None]] = set()
    for a in sorted(
        (a for a in advice if a.required_bytes_after < a.required_bytes_before), key=key
    ):
        effect = (a.count, a.required_bytes_after, a.time_factor)
        if effect not in effects:
            effects.add(effect)
            out.append(a)
    return out


def _context(gpu: GpuSpec, job: Job, request: RecommendRequest) -> GpuContext:
    return gpu_context(
        gpu, job, request.efficiency.mfu, request.efficiency.mbu, request.constraints
    )


class _Advisor:
    def __init__(
        self,
        request: RecommendRequest,
        job: Job,
        *,
        oracle: MemoryOracle,
        ctx: GpuContext,
        before: int,
        trainable: int,
    ) -> None:
        self.request = request
        self.job = job
        self.oracle = oracle
        self.ctx = ctx
        self.gpu = ctx.gpu
        self.before = before
        self.trainable = trainable
        self.base_time = self._time(job.workload, ONE)

    # -- shared
    def _time(self, w: Workload, layout: ParallelLayout) -> float | None:
        job = msgspec.structs.replace(self.job, workload=w)
        ctx = (
            _context(self.gpu, job, self.request)
            if w.precision != self.job.workload.precision
            else self.ctx
        )
        if ctx.rate is None:
            return None
        if job.kind == "inference":
            laid = with_layout(w, layout)
            memory = replica_memory(job, self.oracle, laid, self.gpu, layout.tensor)
            if memory is None:
                return None
            plan = serve_option(
                job,
                ctx,
                w,
                tp=layout.tensor,
                memory=memory,
                c=self.request.constraints,
                oracle=self.oracle,
            )
            return plan.speed_s
        response = self.oracle.response(with_layout(w, layout))
        trainable = response.trainable_parameters if response else self.trainable
        return time_training(job, ctx, layout, trainable, self.request.constraints).seconds

    def _advice(
        self, change: str, w: Workload, detail: str, layout: ParallelLayout = ONE
    ) -> Advice | None:
        after = self.oracle.required(with_layout(w, layout), self.gpu)
        if after is None:
            return None
        t = self._time(w, layout)
        factor = round(t / self.base_time, 3) if t is not None and self.base_time else None
        count = layout.tensor * layout.pipeline * layout.data
        return Advice(
            change=change,
            gpu=self.gpu.id,
            count=count,
            required_bytes_before=self.before,
            required_bytes_after=after,
            fits_after=after <= self.gpu.usable_memory_bytes,
            time_factor=factor,
            gpu_hours_factor=None if factor is None else round(factor * count, 3),
            detail=detail,
        )

    def _combine(self, steps: list[tuple[str, Workload, ParallelLayout]]) -> Advice | None:
        """The fewest of ``steps`` that together make the job fit; None if all do not.

        Greedy: apply the steps in order until the job fits, then drop each step
        whose removal still fits (a later step may have made it unnecessary).
        """
        for count in range(2, len(steps) + 1):
            if self._fits(steps[:count]):
                chosen = steps[:count]
                break
        else:
            return None
        for step in list(chosen[:-1]):
            trial = [s for s in chosen if s is not step]
            if self._fits(trial):
                chosen = trial
        if len(chosen) < 2:
            return None
        w, layout = self._apply(chosen)
        return self._advice(" + ".join(n for n, _, _ in chosen), w, "the changes together", layout)

    def _apply(
        self, steps: list[tuple[str, Workload, ParallelLayout]]
    ) -> tuple[Workload, ParallelLayout]:
        w = self.job.workload
        layout = ONE
        for _, changed, step_layout in steps:
            w = _merge(w, changed, self.job.workload)
            layout = OFFLOAD if step_layout is OFFLOAD else layout
        return w, layout

    def _fits(self, steps: list[tuple[str, Workload, ParallelLayout]]) -> bool:
        w, layout = self._apply(steps)
        after = self.oracle.required(with_layout(w, layout), self.gpu)
        return after is not None and after <= self.gpu.usable_memory_bytes

    # -- training
    def training(self) -> list[Advice]:
        options = _training_options(self.job.workload, self.gpu, self.job.arch)
        out = [
            a for a in (self._advice(n, ww, d, lay) for n, ww, d, lay in options) if a is not None
        ]
        for shard in (self._zero_training(), self._shard_training()):
            if shard is not None:
                out.append(shard)
        if not any(a.fits_after for a in out if a.count == 1):
            # Job-preserving changes, cheapest in time first; then the changes of job
            # (LoRA, QLoRA) when those are not enough. Pure 16-bit supersedes AMP.
            order = ("bf16", "fp16", "amp_", "loss_chunks", "micro-batch", "optimizer=", "gradient_checkpointing=s",
                     "gradient_checkpointing=f", "cpu_offload", "mode=finetune_lora",
                     "mode=finetune_qlora")  # fmt: skip
            names = [n for n, _, _, _ in options]
            steps = sorted(
                (
                    (n, ww, lay)
                    for n, ww, _, lay in options
                    if n != "precision=fp8"
                    and not (n.startswith("amp_") and ("bf16" in names or "fp16" in names))
                ),
                key=lambda step: next(i for i, p in enumerate(order) if step[0].startswith(p)),
            )
            combo = self._combine(steps)
            if combo is not None:
                out.append(combo)
        return out

    def _zero_training(self) -> Advice | None:
        """ZeRO-3 / FSDP full shard over the fewest GPUs of this model that fit it."""
        c = self.request.constraints
        if self.job.workload.mode != "training" or (
            c.required_interconnect == "nvlink" and self.gpu.interconnect.gpu_link is None
        ):
            return None
        count = 2
        while count <= min(c.max_gpus_per_job, 64):
            layout = ParallelLayout(tensor=1, pipeline=1, data=count, zero_stage=3)
            laid, key = self.oracle.laid_out(self.job.workload, layout)
            after = self.oracle.required(laid, self.gpu, key)
            if after is not None and after <= self.gpu.usable_memory_bytes:
                a = self._advice(
                    "zero_stage=3",
                    self.job.workload,
                    f"ZeRO-3 / FSDP full shard of parameters, gradients and optimizer states over "
                    f"{count} GPUs (activations are not sharded)",
                    layout,
                )
                return a
            count *= 2
        return None

    def _shard_training(self) -> Advice | None:
        """The search's cheapest plan on this GPU model; when the job as asked has none
        within the constraints, the same with full activation checkpointing (once the
        states are sharded, the activations are what is left to shrink)."""
        w = self.job.workload
        tries = [("shard over more GPUs", w)]
        if w.gradient_checkpointing != "full" and self.job.arch is not None:
            tries.append(
                (
                    "gradient_checkpointing=full + shard over more GPUs",
                    msgspec.structs.replace(w, gradient_checkpointing="full"),
                )
            )
        for name, changed in tries:
            job = msgspec.structs.replace(self.job, workload=changed)
            plans, _ = training_options(
                job,
                self.ctx,
                self.oracle,
                self.request.constraints,
                objective="cheapest",
                trainable=self.trainable,
            )
            plans = [p for p in plans if p.layout is not None]
            if plans:
                p = min(plans, key=lambda p: objective_key(p, "cheapest"))
                assert p.layout is not None
                return self._advice(
                    name,
                    changed,
                    f"the search's cheapest plan on {self.gpu.id}: {_layout_text(p.layout)}"
                    + (
                        "; full checkpointing recomputes each layer's forward"
                        if changed is not w
                        else ""
                    )
                    + "; the time factor is wall-clock",
                    p.layout,
                )
        return None

    # -- inference
    def inference(self) -> list[Advice]:
        w = self.job.workload
        r = msgspec.structs.replace
        options: list[tuple[str, Workload, str]] = []
        if w.weight_quantization == "none":
            options.append(
                (
                    "weight_quantization=int8",
                    r(w, weight_quantization="int8"),
                    "8-bit weights (LLM.int8 / weight-only int8)",
                )
            )
            options.append(
                (
                    "weight_quantization=int4",
                    r(w, weight_quantization="int4"),
                    "4-bit weights (GPTQ/AWQ class); check quality",
                )
            )
        if w.kv_cache_dtype != "fp8":
            options.append(
                (
                    "kv_cache_dtype=fp8",
                    r(w, kv_cache_dtype="fp8"),
                    "FP8 KV cache (vLLM --kv-cache-dtype fp8): half the cache bytes",
                )
            )
        out = [a for a in (self._advice(n, ww, d) for n, ww, d in options) if a is not None]
        b = w.batch_size
        while b > 1:
            b //= 2
            smaller = r(w, batch_size=b)
            after = self.oracle.required(smaller, self.gpu)
            if after is not None and after <= self.gpu.usable_memory_bytes:
                a = self._advice(
                    f"batch_size={b}",
                    smaller,
                    f"serve {b} sequences at once instead of {w.batch_size}: less KV cache, less throughput per GPU",
                )
                if a is not None:
                    out.append(a)
                break
        plans, _ = serving_options(self.job, self.ctx, self.oracle, self.request.constraints)
        if plans and plans[0].layout is not None:
            lay = ParallelLayout(tensor=plans[0].layout.tensor, pipeline=1, data=1, zero_stage=0)
            a = self._advice("shard over more GPUs", w, _layout_text(lay), lay)
            if a is not None:
                out.append(a)
        if not any(a.fits_after for a in out if a.count == 1):
            steps = [(n, ww, ONE) for n, ww, _ in options if n != "weight_quantization=int8"]
            combo = self._combine(list(reversed(steps)))
            if combo is not None:
                out.append(combo)
        return out


def _training_options(
    w: Workload, g: GpuSpec, arch: Architecture | None
) -> list[tuple[str, Workload, str, ParallelLayout]]:
    """Each single change of a training workload: (name, changed workload, why, layout)."""
    half = "bf16" if "bf16" in g.peak_flops else "fp16"
    r = msgspec.structs.replace
    options: list[tuple[str, Workload, str, ParallelLayout]] = []
    if w.loss_chunks == 1 and arch is not None and not (arch.encoder or arch.classifier):
        options.append(
            (
                f"loss_chunks={LOSS_CHUNKS}",
                r(w, loss_chunks=LOSS_CHUNKS),
                f"cross-entropy in {LOSS_CHUNKS} chunks along the sequence, each upcast to fp32 "
                "alone (torchtune's CEWithChunkedOutputLoss, litgpt's chunked_cross_entropy): "
                f"the fp32 logits over the {arch.vocab_size:,}-token vocabulary are never whole; "
                "about the same FLOPs",
                ONE,
            )
        )
    if w.precision == "fp32":
        options.append(
            (
                f"amp_{half}",
                r(w, precision=f"amp_{half}"),
                "automatic mixed precision: 16-bit matmuls on tensor cores, fp32 weights",
                ONE,
            )
        )
    if w.precision == "fp32" or w.precision.startswith("amp_"):
        options.append(
            (
                half,
                r(w, precision=half),
                "pure 16-bit weights and optimizer states (check numerics; Kahan summation or an fp32 master helps)",
                ONE,
            )
        )
    if w.gradient_checkpointing == "none":
        options.append(
            (
                "gradient_checkpointing=selective",
                r(w, gradient_checkpointing="selective"),
                "recompute the attention core only (Korthikanti et al.): small compute cost",
                ONE,
            )
        )
    if w.gradient_checkpointing != "full":
        options.append(
            (
                "gradient_checkpointing=full",
                r(w, gradient_checkpointing="full"),
                "recompute each layer's forward in backward: about one extra forward (+33% of a 6N step)",
                ONE,
            )
        )
    if w.batch_size > 1:
        options.append(
            (
                f"micro-batch 1 x gradient_accumulation {w.batch_size * w.gradient_accumulation_steps}",
                r(
                    w,
                    batch_size=1,
                    gradient_accumulation_steps=w.batch_size * w.gradient_accumulation_steps,
                ),
                "same global batch in smaller micro-batches (small micro-batches run at lower MFU in practice)",
                ONE,
            )
        )
    if w.optimizer in ("adam", "adamw") and w.mode == "training":
        options.append(
            (
                "optimizer=adamw_8bit",
                r(w, optimizer="adamw_8bit"),
                "bitsandbytes 8-bit AdamW states",
                ONE,
            )
        )
    if w.mode == "training":
        options.append(
            (
                "cpu_offload.optimizer",
                w,
                "ZeRO-Offload: optimizer states and fp32 master in host memory; the step waits on PCIe transfers (CPU Adam time not modelled)",
                OFFLOAD,
            )
        )
        options.append(
            (
                "mode=finetune_lora",
                r(w, mode="finetune_lora"),
                "LoRA adapters instead of full training: a frozen base needs no gradients or optimizer states for it (a different job: fine-tuning)",
                ONE,
            )
        )
    if w.mode in ("training", "finetune_lora"):
        options.append(
            (
                "mode=finetune_qlora",
                r(w, mode="finetune_qlora"),
                "QLoRA: NF4 base weights with LoRA adapters (a different job: fine-tuning; dequantization overhead not modelled)",
                ONE,
            )
        )
    if "fp8" in g.peak_flops and w.precision in ("bf16", "fp16"):
        # The job's own recipe, only the matmuls in fp8: left to itself the estimator
        # takes fp8 as Transformer Engine's recipe with an fp32 master and fp32 Adam
        # states (DeepSpeed's conventions), which doubles a pure 16-bit job's states.
        options.append(
            (
                "precision=fp8",
                r(w, precision="fp8"),
                f"FP8 matmuls (Transformer Engine) on {g.id}'s FP8 path, the optimizer "
                "recipe unchanged: the linears keep fp8 copies of their inputs for backward",
                msgspec.structs.replace(ONE, framework=framework_of(w)),
            )
        )
    return options


def _merge(current: Workload, changed: Workload, original: Workload) -> Workload:
    """``current`` with every field ``changed`` altered from ``original``."""
    updates = {
        f: getattr(changed, f)
        for f in changed.__struct_fields__
        if getattr(changed, f) != getattr(original, f)
    }
    return msgspec.structs.replace(current, **updates)


def _layout_text(layout: ParallelLayout) -> str:
    n = layout.tensor * layout.pipeline * layout.data
    parts = [f"{n} GPUs"]
    if layout.tensor > 1:
        parts.append(f"tensor parallel {layout.tensor}")
    if layout.pipeline > 1:
        parts.append(f"pipeline {layout.pipeline}")
    if layout.data > 1:
        parts.append(
            f"{['DDP', 'ZeRO-1', 'ZeRO-2', 'ZeRO-3/FSDP'][layout.zero_stage]} over {layout.data}"
        )
    return ", ".join(parts)
