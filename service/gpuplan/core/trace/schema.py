"""The traced estimate's request (API) and result (API and CLI).

The CLI traces any Python callable; the API traces only Hugging Face models built
from a ``config.json`` it is sent, because a server must never run client code. Both
answer a :class:`TraceResult`.
"""

from typing import Annotated, Literal

import msgspec

from gpuplan.core.memory.schema import HfConfig
from gpuplan.core.record import Record

TraceMode = Literal["training", "inference"]
TraceOptimizer = Literal["adamw", "adam", "sgd", "sgd_momentum", "none"]
Amp = Literal["none", "bf16", "fp16"]
TraceRuntime = Literal["cuda", "cpu"]
WeightDtype = Literal["fp32", "bf16", "fp16"]
TraceAttention = Literal["eager", "sdpa"]


class TraceModel(Record):
    """The model to trace: a Hugging Face ``config.json``, read offline."""

    hf_config: HfConfig
    """The contents of ``config.json``; ``model_type`` picks the transformers class. The
    model is built from it under fake tensors: no weights, no hub, no remote code."""


class TraceWorkload(Record):
    """The step to trace."""

    mode: TraceMode | Literal["train"] = "training"
    """``training``: forward, backward, optimizer step, ``zero_grad(set_to_none=True)``.
    ``inference``: a no-grad forward that keeps its KV cache and last-position logits
    (an encoder-decoder: the encoder's output too, and logits at each decoder position).
    ``train`` is the earlier spelling of ``training``, still accepted (deprecated)."""

    batch_size: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 1
    sequence_length: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] = 512
    """Tokens per sequence: a decoder-only model's input, an encoder-decoder's encoder
    input. Not used by speech seq2seq (Whisper): its encoder always takes 30 s of audio,
    ``input_features`` of ``num_mel_bins`` × 2·``max_source_positions`` frames, as its
    feature extractor pads every clip."""

    decoder_sequence_length: Annotated[int, msgspec.Meta(ge=1, le=1 << 20)] | None = None
    """Encoder-decoders only (T5, BART, Whisper, ...): tokens the decoder takes
    (``decoder_input_ids``; in training also the ``labels``). Unset: ``sequence_length``
    for a text seq2seq model, ``max_target_positions`` (448) for Whisper; with
    ``new_tokens``, 1 (the decoder start token ``generate`` begins with), after which
    the decode steps follow. A decoder-only model refuses it."""
    dtype: WeightDtype = "fp32"
    """Type the weights are built in (``dtype=`` of ``from_config``)."""

    amp: Amp = "none"
    """Autocast the forward to this type (mixed precision over fp32 weights)."""

    optimizer: TraceOptimizer = "adamw"
    steps: Annotated[int, msgspec.Meta(ge=1, le=8)] = 2
    """Steps to run; the result describes the last (the steady state from step 2 on)."""

    attention: TraceAttention = "sdpa"
    gradient_checkpointing: bool = False
    fsdp: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    """Trace rank 0 of an FSDP2 job of this many ranks (fully_shard per decoder layer)."""

    tensor_parallel: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 1
    """Trace rank 0 of this many tensor-parallel ranks (the model's Hugging Face TP plan);
    with ``fsdp``, rank 0 of a 2-D mesh: TP within groups of this many ranks, FSDP
    across ``fsdp`` groups."""

    keep_outputs: bool = False
    """Training: the loop holds the model's output (logits, a causal LM's KV cache)
    through backward and the optimizer step, as ``out = model(**batch);
    out.loss.backward(); opt.step()`` does; by default it drops it once it has the loss,
    as Hugging Face's ``Trainer``."""

    new_tokens: Annotated[int, msgspec.Meta(ge=0, le=1024)] = 0
    """Inference only: greedy decode steps after the prefill, one token each, reusing and
    growing its KV cache (the peak is then often at the last step). An encoder-decoder
    runs its encoder once and keeps its output; each step runs the decoder alone."""

    expandable_segments: bool = False
    """Replay the allocations as ``PYTORCH_ALLOC_CONF=expandable_segments:True`` (formerly
    ``PYTORCH_CUDA_ALLOC_CONF``; torchtitan's ``run_train.sh`` sets it) has PyTorch's
    caching allocator serve them: one segment per pool, growing by pages at its end,
    instead of segments shaped by earlier requests. Replayed so, an H200's run of
    varying-length batches reserved within 0.3% of what it measured (docs/memory.md).
    Runtime ``cuda`` only."""

    def __post_init__(self) -> None:
        if self.mode == "train":  # the spelling before /v1/memory/estimate's was adopted
            self.mode = "training"


def workload_conflicts(
    workload: TraceWorkload, runtime: TraceRuntime = "cuda"
) -> list[tuple[str, str]]:
    """Fields of ``workload`` that contradict each other or the ``runtime``:
    ``(path, reason)`` pairs, paths relative to the workload."""
    conflicts = []
    if workload.expandable_segments and runtime != "cuda":
        conflicts.append(
            (
                "expandable_segments",
                "a setting of the CUDA caching allocator, which runtime cpu does not model: "
                "use runtime cuda",
            )
        )
    if workload.new_tokens and workload.mode != "inference":
        conflicts.append(("new_tokens", "decode steps need mode 'inference'"))
    if workload.keep_outputs and workload.mode == "inference":
        conflicts.append(("keep_outputs", "applies to training (inference keeps its cache)"))
    return conflicts


class TraceRequest(Record):
    """``POST /v1/memory/trace``."""

    model: TraceModel
    workload: TraceWorkload = msgspec.field(default_factory=TraceWorkload)
    runtime: TraceRuntime = "cuda"
    """``cuda`` replays the allocations through a model of the CUDA caching allocator
    and adds the context; ``cpu`` reports the tensor bytes alone."""


class TraceBreakdown(Record):
    """Tensor bytes alive at the peak, by role."""

    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int
    """Created in a forward pass (incl. checkpoint recomputation) and still alive."""

    temporary_bytes: int
    """Created in backward or the optimizer step, not a gradient or optimizer state."""

    other_bytes: int
    """Buffers, inputs and (runtime cuda) the cuBLAS/cuBLASLt workspaces."""


class PhasePeaks(Record):
    """Peak tensor bytes within each phase of the measured step (0: phase not run)."""

    forward_bytes: int
    """Training: the forward pass; inference: the prefill."""

    backward_bytes: int
    optimizer_bytes: int
    decode_bytes: int = 0
    """Inference with ``new_tokens``: the decode steps."""


class ModuleMemory(Record):
    """A module and the bytes attributed to it at the peak: its parameters, their
    gradients and optimizer state, and the activations its forward created."""

    module: str
    bytes: int


class TraceResult(Record):
    """Peak memory of one traced step on one device."""

    parameters: int
    trainable_parameters: int
    peak_bytes: int
    """Tensor bytes at the peak. ``cuda``: what ``torch.cuda.max_memory_allocated`` would
    report (512-byte blocks, unsplit remainders, cuBLAS workspaces); ``cpu``: the sum
    of storage sizes, what the CPU allocator's profiler events show."""

    reserved_bytes: int
    """``cuda``: peak of the caching allocator's segments (``max_memory_reserved``);
    ``cpu``: equal to ``peak_bytes``."""

    device_bytes: int
    """What ``nvidia-smi`` would show: ``reserved_bytes`` plus what no allocator sees
    (the CUDA context with the job's kernels, NCCL buffers); ``cpu``: ``peak_bytes``."""

    required_bytes: int
    """``device_bytes`` plus the seed guide's flat 20% headroom (the tracer has no residuals
    of its own to draw an interval from, unlike the estimate)."""

    total_bytes: int
    """Deprecated: the same as ``device_bytes``."""

    peak_phase: str
    breakdown: TraceBreakdown
    phases: PhasePeaks
    top_modules: list[ModuleMemory]
    runtime: TraceRuntime
    mode: TraceMode
    steps: int
    device: str
    """Device type the tensors were faked on."""

    seconds: float
    """Wall time of the trace (model build included)."""

    notes: list[str]
    new_tokens: int = 0
    """Decode steps after the prefill (inference)."""
