"""The global batch of a training job: the one the request states, or a published
recipe's, said so.

The global batch (sequences per optimizer step) decides which layouts exist: the
search keeps it on every GPU count, and data-parallel ranks must divide it. Read as
micro-batch x accumulation x data-parallel ranks of a workload that writes none of
them, it is one sequence, which leaves only tensor and pipeline layouts and answers a
70B job with a plan three times the GPU-hours of a real recipe's (issue 37). So a
request that states no global batch is planned at a published recipe's
(data/global_batch.toml), and the answer's warnings name it, its source and how to
state one's own.

The request states it with ``training.global_batch_size`` (sequences) or
``training.global_batch_tokens`` (tokens per step), or through its workload:
``gradient_accumulation_steps`` or ``parallelism.data`` above 1 make micro-batch x
accumulation x data the global batch (a micro-batch alone is a memory choice, not a
batch). ``layout: given`` times the written layout, whose batch is what it writes.
"""

import math
import tomllib
from functools import cache
from importlib import resources
from typing import Literal, get_args

import msgspec

from gpuplan.core.errors import DataError
from gpuplan.core.recommend.schema import MAX_GLOBAL_BATCH, RecommendRequest
from gpuplan.core.record import Record

BatchKind = Literal["training", "lora", "vision"]
"""Which default applies: ``training`` (mode training of a sequence model), ``lora`` (the
LoRA and QLoRA modes), ``vision`` (a vision preset, counted in images)."""

StatedBy = Literal["global_batch_size", "global_batch_tokens", "workload", "default"]


class BatchDefault(Record, kw_only=True):
    """One published recipe's global batch."""

    applies_to: BatchKind
    tokens: int | None = None
    """Tokens per step, turned into sequences at the workload's sequence length."""

    sequences: int | None = None
    """Sequences (images) per step."""

    source: str
    quote: str
    note: str


class BatchDefaults(Record, kw_only=True):
    round_to_multiple: int
    """Tokens that come to no whole number of sequences round to a multiple of this."""

    default: list[BatchDefault]

    def of(self, kind: BatchKind) -> BatchDefault:
        return next(d for d in self.default if d.applies_to == kind)


class GlobalBatch(Record, kw_only=True):
    """The global batch a job is planned at, and how it came to be."""

    sequences: int
    stated_by: StatedBy
    text: str
    """For the assumptions: the batch and where it comes from."""

    warning: str | None = None
    """For the answer's warnings when a default applies."""


def parse_defaults(text: str, origin: str) -> BatchDefaults:
    """The defaults file, validated: every kind once, exactly one of tokens and sequences,
    positive figures, a source and a quote on each (raises :class:`DataError`)."""
    try:
        data = msgspec.convert(tomllib.loads(text), BatchDefaults)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise DataError(f"{origin}: {exc}") from None
    if data.round_to_multiple < 1:
        raise DataError(f"{origin}: round_to_multiple must be at least 1")
    kinds = sorted(d.applies_to for d in data.default)
    if kinds != sorted(get_args(BatchKind)):
        raise DataError(f"{origin}: expected one default per kind, got {kinds}")
    for i, d in enumerate(data.default):
        where = f"{origin}: default[{i}] ({d.applies_to})"
        if (d.tokens is None) == (d.sequences is None):
            raise DataError(f"{where}: give exactly one of tokens and sequences")
        figure = d.tokens if d.tokens is not None else d.sequences
        if figure is None or not 1 <= figure <= MAX_GLOBAL_BATCH * 16_384:
            raise DataError(f"{where}: the batch must be positive")
        if d.applies_to == "vision" and d.tokens is not None:
            raise DataError(f"{where}: a vision model's batch is in images (sequences)")
        if not d.source.strip() or not d.quote.strip():
            raise DataError(f"{where}: a default needs its source and the quote it rests on")
    return data


@cache
def batch_defaults() -> BatchDefaults:
    name = "global_batch.toml"
    text = resources.files("gpuplan.core.recommend.data").joinpath(name).read_text("utf-8")
    return parse_defaults(text, name)


def sequences_of(tokens: int, sequence_length: int, multiple: int) -> int:
    """Sequences per step of ``tokens`` per step: a whole number kept as it is; else the
    nearest multiple of ``multiple`` (below it, the nearest power of two; at least 1),
    so that data-parallel ranks of a power of two divide it."""
    whole, rest = divmod(tokens, sequence_length)
    if rest == 0:
        return whole
    n = tokens / sequence_length
    if n >= multiple:
        return round(n / multiple) * multiple
    return 1 if n < 1 else 1 << round(math.log2(n))


def global_batch(
    request: RecommendRequest, *, vision: bool, errors: list[tuple[str, str]]
) -> GlobalBatch:
    """The job's global batch; an unusable statement adds an error naming its field."""
    w = request.workload
    p = w.parallelism
    written = GlobalBatch(
        sequences=w.batch_size * w.gradient_accumulation_steps * p.data,
        stated_by="workload",
        text=f"{w.batch_size * w.gradient_accumulation_steps * p.data:,} {_unit(vision)} "
        "(batch_size x gradient_accumulation_steps x parallelism.data as written)",
    )
    stated = _stated(request, vision=vision, errors=errors)
    if request.layout == "given":
        if stated is not None and stated.sequences != written.sequences:
            errors.append(
                (
                    f"$.training.{stated.stated_by}",
                    "layout given: the global batch is batch_size x gradient_accumulation_steps "
                    f"x parallelism.data = {written.sequences}, not {stated.sequences}",
                )
            )
        return written
    if stated is not None:
        return stated
    if errors or w.mode == "inference" or w.gradient_accumulation_steps > 1 or p.data > 1:
        return written
    return _default(request, vision=vision)


def _stated(
    request: RecommendRequest, *, vision: bool, errors: list[tuple[str, str]]
) -> GlobalBatch | None:
    """The global batch ``training`` states, if it states one it can be planned at."""
    tv = request.training
    if tv is None:
        return None
    seq = request.workload.sequence_length
    if tv.global_batch_size is not None and tv.global_batch_tokens is not None:
        both = "give global_batch_size (sequences) or global_batch_tokens (tokens), not both"
        errors += [("$.training.global_batch_size", both), ("$.training.global_batch_tokens", both)]
        return None
    if tv.global_batch_size is not None:
        return GlobalBatch(
            sequences=tv.global_batch_size,
            stated_by="global_batch_size",
            text=f"{tv.global_batch_size:,} {_unit(vision)} (training.global_batch_size)",
        )
    if tv.global_batch_tokens is None:
        return None
    return _of_tokens(tv.global_batch_tokens, seq, vision=vision, errors=errors)


def _of_tokens(
    tokens: int, seq: int | None, *, vision: bool, errors: list[tuple[str, str]]
) -> GlobalBatch | None:
    """``training.global_batch_tokens`` in sequences, or None with an error naming it."""
    path = "$.training.global_batch_tokens"
    if vision:
        errors.append((path, "a vision model's batch is in images: use global_batch_size"))
        return None
    if seq is None:
        errors.append((path, "needs workload.sequence_length to count sequences"))
        return None
    n = sequences_of(tokens, seq, batch_defaults().round_to_multiple)
    if n > MAX_GLOBAL_BATCH:
        errors.append(
            (path, f"comes to {n:,} sequences of {seq:,} tokens; at most {MAX_GLOBAL_BATCH:,}")
        )
        return None
    rounded = "" if n * seq == tokens else f", rounded from {tokens / seq:,.1f}"
    return GlobalBatch(
        sequences=n,
        stated_by="global_batch_tokens",
        text=f"{n:,} sequences of {seq:,} tokens (training.global_batch_tokens "
        f"{tokens:,}{rounded})",
    )


def _default(request: RecommendRequest, *, vision: bool) -> GlobalBatch:
    """A published recipe's batch (at least the workload's micro-batch), with its warning."""
    w = request.workload
    data = batch_defaults()
    kind: BatchKind = (
        "vision"
        if vision
        else "lora"
        if w.mode in ("finetune_lora", "finetune_qlora")
        else "training"
    )
    d = data.of(kind)
    seq = w.sequence_length or 1
    unit = _unit(vision)
    if d.tokens is not None:
        n = sequences_of(d.tokens, seq, data.round_to_multiple)
        figure = f" ({d.tokens:,} tokens per step"
        figure += f" at sequence_length {seq:,})" if w.sequence_length is not None else ")"
    else:
        n = d.sequences or 1
        figure = ""
    if w.batch_size > n:
        n, figure = w.batch_size, f" (the workload's batch_size, above the recipe's {n:,})"
    n = min(n, MAX_GLOBAL_BATCH)
    applies = {
        "training": "mode training",
        "lora": "the LoRA modes",
        "vision": "a vision model",
    }[kind]
    tokens = "" if vision else " or training.global_batch_tokens"
    quote = " ".join(d.quote.split())
    warning = (
        f"no global batch stated: planned at {n:,} {unit} per optimizer step{figure}, "
        f'the default for {applies} from {d.source}: "{quote}"; state yours with '
        f"training.global_batch_size{tokens}"
    )
    return GlobalBatch(
        sequences=n,
        stated_by="default",
        text=f"{n:,} {unit}{figure}, the default for {applies} (see warnings)",
        warning=warning,
    )


def _unit(vision: bool) -> str:
    return "images" if vision else "sequences"
