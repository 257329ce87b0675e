"""Traced peaks equal real peaks: the same models take the same steps for real on this CPU.

Every case traces a target under fake tensors (runtime cpu: plain storage bytes) and
measures the same target with real tensors, through the same step driver, from the
allocator events of torch's profiler. The bar is 0.5%; in practice the two agree to
the byte or within a few bytes (scalar tensors made outside the dispatcher). The
cases cover what a fake tensor cannot show by itself: the scratch CPU kernels take
inside a call (convolutions, LSTMs: kernel probes) and the gradient sums the autograd
engine makes in place on real tensors only (fan-out, a Python loop over time steps),
with the two cases where it must not (a gradient held twice, an expanded one); the
scratch of a composite kernel (Falcon's softmax); and a library branch on tensor
values (transformers' packed-sequence check, under activation checkpointing).
"""

from collections.abc import Callable
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.torch]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from bench.accuracy.measure_target import measure_target  # noqa: E402

from gpuplan.core.trace.schema import Amp, TraceMode, TraceOptimizer  # noqa: E402
from gpuplan.trace.run import trace  # noqa: E402
from tests.trace_targets import models  # noqa: E402

TOLERANCE = 0.005


def _seeded(name: str) -> Callable[[], Any]:
    target = getattr(models, name)

    def build() -> Any:
        torch.manual_seed(0)
        return target()

    return build


CASES: list[tuple[str, TraceMode, TraceOptimizer, Amp]] = [
    ("mlp", "training", "adamw", "none"),
    ("mlp", "inference", "none", "none"),
    ("cnn", "training", "adamw", "none"),
    ("cnn", "inference", "none", "none"),
    ("cnn", "training", "adamw", "bf16"),
    ("cnn_channels_last", "training", "sgd", "none"),
    ("conv1d_bf16", "training", "adamw", "none"),
    ("conv_transpose", "training", "adam", "none"),
    ("conv3d", "inference", "none", "none"),
    ("lstm", "training", "adamw", "none"),
    ("lstm", "inference", "none", "none"),
    ("rnn_loop", "training", "adamw", "none"),
    ("grad_twice", "training", "sgd", "none"),
    ("grad_expanded", "training", "sgd", "none"),
    ("hf_mamba", "training", "adamw", "none"),
    ("hf_falcon", "inference", "none", "none"),
    ("hf_llama_checkpointed", "training", "adamw", "bf16"),
    ("transformer", "training", "adam", "none"),
    ("checkpointed", "training", "adamw", "none"),
    ("hf_llama", "training", "adamw", "none"),
    ("hf_llama", "training", "adamw", "bf16"),
    ("hf_llama_eager", "training", "sgd", "none"),
    ("hf_llama_bf16", "training", "adamw", "none"),
    ("hf_llama", "inference", "none", "none"),
    ("hf_mixtral", "training", "adamw", "none"),
    ("hf_mixtral_bf16", "training", "adamw", "none"),
]


@pytest.mark.parametrize(("name", "mode", "optimizer", "amp"), CASES)
def test_traced_peak_equals_measured_peak(
    name: str, mode: TraceMode, optimizer: TraceOptimizer, amp: Amp
) -> None:
    build = _seeded(name)
    traced = trace(build, mode=mode, optimizer=optimizer, amp=amp, runtime="cpu")
    measured = measure_target(build, mode=mode, optimizer=optimizer, amp=amp)
    assert traced.parameters == measured.parameters
    error = (traced.peak_bytes - measured.peak_bytes) / measured.peak_bytes
    assert abs(error) <= TOLERANCE, (traced.peak_bytes, measured.peak_bytes)
    assert traced.phases.forward_bytes == pytest.approx(measured.phases["forward"], rel=TOLERANCE)
    if mode == "training":
        assert traced.phases.backward_bytes == pytest.approx(
            measured.phases["backward"], rel=TOLERANCE
        )
        assert traced.phases.optimizer_bytes == pytest.approx(
            measured.phases["optimizer"], rel=TOLERANCE
        )


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_foreach_optimizer_kernels(optimizer: TraceOptimizer) -> None:
    """The multi-tensor optimizer kernels torch uses on CUDA (runtime cuda traces with
    them), run here on the CPU: their parameter-sized temporaries are where a large
    model's CUDA peak often sits."""
    build = _seeded("hf_llama")
    traced = trace(build, optimizer=optimizer, runtime="cpu", foreach=True)
    measured = measure_target(build, optimizer=optimizer, foreach=True)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes
    assert traced.phases.optimizer_bytes == pytest.approx(
        measured.phases["optimizer"], rel=TOLERANCE
    )


def test_lstm_native_kernel() -> None:
    """LSTM on torch's native CPU kernel. With oneDNN enabled (the CPU default) its RNN
    kernel keeps a workspace whose meta kernel reports it empty; on a GPU the cuDNN
    kernel runs instead, so the CPU comparison is made on the native kernel."""
    build = _seeded("lstm")
    with torch.backends.mkldnn.flags(enabled=False):
        traced = trace(build, runtime="cpu")
        measured = measure_target(build)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes


def test_cnn_without_kernel_probes_misses_onednn_buffers() -> None:
    """What the probes are for: oneDNN's convolutions reorder inputs and weights into
    blocked layouts inside the kernel, where no fake tensor sees them. Without probes
    the traced peak is low, never high, and says why it may be."""
    build = _seeded("cnn")
    traced = trace(build, runtime="cpu", probe_budget_bytes=0)
    measured = measure_target(build)
    assert traced.peak_bytes < measured.peak_bytes * (1 - TOLERANCE)
    assert traced.phases.forward_bytes <= measured.phases["forward"]
    assert not any("in-kernel scratch" in note for note in traced.notes)
    probed = trace(build, runtime="cpu")
    assert any("measured by running each once" in note for note in probed.notes)


@pytest.mark.parametrize("name", ["hf_llama_generate", "hf_mixtral_generate_bf16"])
def test_decode_steps_equal_measured(name: str) -> None:
    """A prompt of 2 tokens for 16 sequences, then 24 greedy decode steps whose KV cache
    outgrows the prefill: the peak moves into the decode phase, where the trace still
    agrees."""
    build = _seeded(name)
    traced = trace(build, mode="inference", optimizer="none", runtime="cpu", new_tokens=24)
    measured = measure_target(build, mode="inference", optimizer="none", new_tokens=24)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes
    assert traced.phases.decode_bytes == pytest.approx(measured.phases["decode"], rel=TOLERANCE)
    assert traced.phases.forward_bytes == pytest.approx(measured.phases["forward"], rel=TOLERANCE)
    assert traced.new_tokens == 24
    assert traced.peak_phase == "decode"
    prefill_only = trace(build, mode="inference", optimizer="none", runtime="cpu")
    assert prefill_only.phases.decode_bytes == 0
    assert traced.peak_bytes >= prefill_only.peak_bytes


@pytest.mark.parametrize(("name", "ranks"), [("hf_llama", 4), ("checkpointed", 2)])
def test_fsdp_rank_peak_equals_measured(name: str, ranks: int) -> None:
    """Rank 0 of an FSDP2 job on a fake process group: the real run allocates the
    same shards, unsharded buffers and reduce-scatter outputs with real tensors."""
    build = _seeded(name)
    traced = trace(build, runtime="cpu", fsdp=ranks)
    measured = measure_target(build, fsdp=ranks)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes
    whole = trace(build, runtime="cpu")
    assert traced.breakdown.parameters_bytes * ranks == pytest.approx(
        whole.breakdown.parameters_bytes, rel=0.01
    )
    assert traced.peak_bytes < whole.peak_bytes


def test_fsdp_over_tensor_parallel_rank_peak_equals_measured() -> None:
    """Rank 0 of a 2x2 mesh: the TP plan within pairs of ranks, FSDP2 across them over
    the TP-sharded parameters (torchtitan's layout)."""
    build = _seeded("hf_llama")
    traced = trace(build, runtime="cpu", fsdp=2, tensor_parallel=2)
    measured = measure_target(build, fsdp=2, tensor_parallel=2)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes
    tp_only = trace(build, runtime="cpu", tensor_parallel=2)
    assert traced.breakdown.parameters_bytes < tp_only.breakdown.parameters_bytes
    assert any("2x2 mesh" in note for note in traced.notes)
    assert any("tensor parallel: rank 0 of 2" in note for note in traced.notes)


def test_tensor_parallel_rank_peak_equals_measured() -> None:
    """Rank 0 of 2-way tensor parallelism from the model's Hugging Face TP plan."""
    build = _seeded("hf_llama")
    traced = trace(build, runtime="cpu", tensor_parallel=2)
    measured = measure_target(build, tensor_parallel=2)
    assert abs(traced.peak_bytes - measured.peak_bytes) <= TOLERANCE * measured.peak_bytes
    whole = trace(build, runtime="cpu")
    assert traced.breakdown.parameters_bytes < whole.breakdown.parameters_bytes
    assert any("tensor parallel" in note for note in traced.notes)
