"""The job as the search sees it: the request resolved once, before any GPU is tried."""

import math
from typing import TypeVar

import msgspec

from gpuplan.core.catalog import DEFAULT_PROVIDERS, Catalog, PriceKind, ProviderId, UnknownGpu
from gpuplan.core.catalog.model import Precision as CatalogPrecision
from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.memory.checks import check_workload
from gpuplan.core.memory.errors import InvalidModel
from gpuplan.core.memory.model import ResolvedModel, resolve_model
from gpuplan.core.memory.parameters import ParameterCount, count_parameters, is_moe_layer
from gpuplan.core.memory.schema import Parallelism, Workload
from gpuplan.core.perf.cost import EnergyInputs, OnPremInputs
from gpuplan.core.perf.flops import TokenFlops, token_flops
from gpuplan.core.recommend.batch import GlobalBatch, global_batch
from gpuplan.core.recommend.engine import (
    PLACEHOLDER_MODEL,
    engine_errors,
    model_context,
    model_source,
)
from gpuplan.core.recommend.errors import InvalidRecommendation
from gpuplan.core.recommend.schema import InferenceVolume, PriceOverride, RecommendRequest
from gpuplan.core.record import Record

DEFAULT_OUTPUT_TOKENS = 256

T = TypeVar("T")


class Job(Record, kw_only=True):
    kind: str
    """``training`` or ``inference``."""

    workload: Workload
    """The request's workload with the parallelism left to the search."""

    given: Parallelism
    """The request's own parallelism (``layout: given`` times exactly this)."""

    global_batch: int
    """Training: sequences per optimizer step, kept on every layout the search tries."""

    batch: GlobalBatch
    """How the global batch came to be (stated, written, or a recipe's default)."""

    mlp_width: int
    """Active MLP width per token (experts per token x expert width, plus shared)."""

    kv_width: int
    moe_layers: int
    experts_per_token: int

    arch: Architecture | None
    vision: bool = False
    """A vision preset: FLOPs per sample measured, work counted in samples."""

    flops: TokenFlops
    parameters: int
    root_parameters: int = 0
    """Embeddings, final norm and head: what FSDP1's root unit holds."""

    tokens: float
    """Training: tokens to train on. Inference: unused (0)."""

    evaluation_tokens: float = 0.0
    """Training: tokens the run's evaluations read, all of them (``training.evaluation``'s
    tokens x count; 0: none)."""

    prompt_tokens: int
    output_tokens: int
    requests_per_second: float | None
    inference: InferenceVolume
    """The serving work as requested (defaults when absent)."""

    model_context: int | None = None
    """The model's own longest sequence (its config.json), when known."""

    model_path: str = "MODEL"
    """What a serving plan's launch command loads."""

    duration_hours: float
    energy: EnergyInputs
    owned: OnPremInputs
    overlap: float | None
    """The request's ``efficiency.comm_overlap``, else the framework's."""

    measured: dict[str, dict[CatalogPrecision, float]]
    """Catalog id -> precision -> measured FLOP/s."""

    prices: dict[str, PriceOverride]
    """Catalog id -> the request's price override."""

    providers: tuple[ProviderId, ...]
    """The price tables a cloud price is read from (the request's, else the default)."""

    price_kind: PriceKind
    default_basis: bool
    """True when the request named no providers."""


def _flops(
    model: ResolvedModel, counts: ParameterCount | None, total: int, image_size: int | None
) -> TokenFlops:
    """Per-token (per-sample, for vision) FLOP terms of the model.

    A vision preset carries its measured forward FLOPs per sample: a convolution
    reuses each weight at every pixel, so 2 x parameters says nothing of its cost.
    They scale with the image's area; a sample is the work unit ("token") of the job.
    """
    vision = model.vision
    if vision is None:
        return token_flops(model.arch, counts, total)
    size = image_size or vision.reference_image_size
    forward = vision.forward_flops_per_sample * (size / vision.reference_image_size) ** 2
    return TokenFlops(matmul_parameters=round(forward / 2), attention_per_context_token=0.0)


def resolve_job(request: RecommendRequest, catalog: Catalog) -> Job:
    """Check the request as a whole and resolve every name in it to a catalog id."""
    w = request.workload
    errors: list[tuple[str, str]] = []
    if request.runtime == "cpu":
        errors.append(("$.runtime", "a recommendation plans GPUs; use cuda or rocm"))
    model = resolve_model(request.model)
    arch, bare = model.arch, model.parameters
    counts = count_parameters(arch) if arch is not None else None
    total = bare if bare is not None else (counts.total if counts is not None else 0)
    inference = w.mode == "inference"
    tokens = 0.0 if inference else _training_tokens(request, errors)
    if inference and request.training is not None:
        errors.append(("$.training", "training work applies to training and fine-tuning modes"))
    if not inference and request.inference is not None:
        errors.append(("$.inference", "inference work applies to workload.mode inference"))
    iv = request.inference or InferenceVolume()
    prompt = iv.prompt_tokens or w.sequence_length or 1
    output = iv.output_tokens or w.max_new_tokens or DEFAULT_OUTPUT_TOKENS
    errors += _layout_errors(request)
    config, repo = model_source(request.model)
    context = model_context(config)
    if inference:
        errors += engine_errors(
            iv,
            full_tokens=prompt + output,
            context=context,
            given_tp=w.parallelism.tensor if request.layout == "given" else None,
            batch_size=w.batch_size,
        )
        if iv.slo is not None and iv.requests_per_second is None:
            errors.append(
                (
                    "$.inference.slo",
                    "percentile targets are for a request rate: give inference.requests_per_second",
                )
            )
        elif iv.slo is not None and w.batch_size > 1:
            errors.append(
                (
                    "$.inference.slo",
                    "a static batch (workload.batch_size above 1) has no arrival queue; "
                    "use max_time_to_first_token_s / max_time_per_output_token_s",
                )
            )
    batch = global_batch(request, vision=model.vision is not None, errors=errors)
    try:
        # The request's own layout is checked whatever the mode: the search times it too.
        check_workload(arch, w, vision=model.vision is not None)
    except InvalidModel as exc:
        errors.extend(exc.errors)
    measured = _by_id(request.measured_flops, catalog, "$.measured_flops", errors)
    prices = _by_id(request.constraints.prices, catalog, "$.constraints.prices", errors)
    tables = {p.id for p in catalog.providers}
    for i, provider in enumerate(request.pricing.providers):
        if provider not in tables:
            errors.append(
                (f"$.pricing.providers[{i}]", f"this catalog has no price table for `{provider}`")
            )
    if errors:
        raise InvalidRecommendation(errors)
    c = request.constraints
    base = msgspec.structs.replace(
        w,
        sequence_length=prompt if inference and arch is not None else w.sequence_length,
        max_new_tokens=output if inference else w.max_new_tokens,
        # What the search keeps of the request's parallelism: choices of how, not how much.
        parallelism=Parallelism(
            sequence_parallel=w.parallelism.sequence_parallel,
            expert_dispatcher=w.parallelism.expert_dispatcher,
        ),
    )
    return Job(
        kind="inference" if inference else "training",
        workload=base,
        given=w.parallelism,
        global_batch=batch.sequences,
        batch=batch,
        mlp_width=_mlp_width(arch),
        kv_width=arch.kv_dim if arch is not None else 0,
        moe_layers=_moe_layers(arch),
        experts_per_token=arch.moe.experts_per_token if arch is not None and arch.moe else 0,
        arch=arch,
        vision=model.vision is not None,
        flops=_flops(model, counts, total, w.image_size),
        parameters=total,
        root_parameters=counts.embedding + counts.head + counts.final if counts else 0,
        tokens=tokens,
        evaluation_tokens=_evaluation_tokens(request) if not inference else 0.0,
        prompt_tokens=prompt,
        output_tokens=output,
        requests_per_second=iv.requests_per_second,
        inference=iv,
        model_context=context,
        model_path=iv.model_path or repo or PLACEHOLDER_MODEL,
        duration_hours=iv.duration_hours,
        energy=EnergyInputs(
            electricity_usd_per_kwh=c.electricity_usd_per_kwh,
            pue=c.pue,
            power_fraction_of_tdp=c.power_fraction_of_tdp,
        ),
        owned=OnPremInputs(
            amortization_years=c.amortization_years, utilization=c.on_prem_utilization
        ),
        overlap=request.efficiency.comm_overlap,
        measured=measured,
        prices=prices,
        providers=tuple(dict.fromkeys(request.pricing.providers)) or DEFAULT_PROVIDERS,
        price_kind=request.pricing.kind,
        default_basis=not request.pricing.providers,
    )


def _layout_errors(request: RecommendRequest) -> list[tuple[str, str]]:
    """What contradicts the layout the request fixes or the counts it allows."""
    errors = []
    c, w, p = request.constraints, request.workload, request.workload.parallelism
    for i, n in enumerate(c.gpu_counts):
        if n > c.max_gpus_per_job:
            errors.append(
                (
                    f"$.constraints.gpu_counts[{i}]",
                    f"{n} is over max_gpus_per_job {c.max_gpus_per_job}",
                )
            )
    if request.layout != "given":
        return errors
    if w.mode == "inference":
        for name in ("pipeline", "context"):
            if getattr(p, name) > 1:
                errors.append(
                    (
                        f"$.workload.parallelism.{name}",
                        "a serving plan is replicas (data) of tensor-parallel GPUs; "
                        f"{name} parallel serving is not modelled",
                    )
                )
    return errors


def _training_tokens(request: RecommendRequest, errors: list[tuple[str, str]]) -> float:
    """Tokens the training work comes to (0 with an error when it is missing or mixed)."""
    tv = request.training
    seq = request.workload.sequence_length or 1
    if tv is None:
        errors.append(
            (
                "$.training",
                "training work is required: training_tokens, samples, or epochs with dataset_samples",
            )
        )
        return 0.0
    forms = [
        tv.training_tokens is not None,
        tv.samples is not None,
        tv.epochs is not None or tv.dataset_samples is not None,
    ]
    if sum(forms) != 1:
        errors.append(
            (
                "$.training",
                "give exactly one of training_tokens, samples, or epochs with dataset_samples",
            )
        )
        return 0.0
    if tv.training_tokens is not None:
        return float(tv.training_tokens)
    if tv.samples is not None:
        return float(tv.samples) * seq
    if tv.epochs is None or tv.dataset_samples is None:
        errors.append(("$.training", "epochs and dataset_samples go together"))
        return 0.0
    return tv.epochs * tv.dataset_samples * seq


def _evaluation_tokens(request: RecommendRequest) -> float:
    """Tokens the training run's evaluations read together (0: none stated)."""
    ev = request.training.evaluation if request.training is not None else None
    return float(ev.tokens) * ev.count if ev is not None else 0.0


def _by_id(
    table: dict[str, T], catalog: Catalog, path: str, errors: list[tuple[str, str]]
) -> dict[str, T]:
    out: dict[str, T] = {}
    for name, value in table.items():
        try:
            out[catalog.get(name).id] = value
        except UnknownGpu as exc:
            errors.append((f"{path}.{name}", exc.reason))
    return out


def ceil_div(a: float, b: float) -> int:
    return max(math.ceil(a / b - 1e-12), 1)


def _mlp_width(arch: Architecture | None) -> int:
    """The MLP width one token passes through (its active experts' and the shared one)."""
    if arch is None:
        return 0
    moe = arch.moe
    if moe is None:
        return arch.intermediate_size
    return moe.experts_per_token * moe.expert_intermediate_size + moe.shared_intermediate_size


def _moe_layers(arch: Architecture | None) -> int:
    if arch is None:
        return 0
    return sum(is_moe_layer(arch, i) for i in range(arch.num_layers))
