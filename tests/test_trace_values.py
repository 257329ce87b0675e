"""Value-dependent library decisions under fake tensors: answered as for an ordinary batch."""

import pytest

pytestmark = pytest.mark.torch

torch = pytest.importorskip("torch")
masking = pytest.importorskip("transformers.masking_utils")

from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402

from gpuplan.trace.values import PACKING_NOTE, ordinary_batches  # noqa: E402


def test_fake_position_ids_are_an_unpacked_batch_real_ones_are_read() -> None:
    packed = torch.tensor([[0, 1, 2, 0, 1, 0]])  # three sequences in one row
    original = masking.find_packed_sequence_indices
    with ordinary_batches() as notes:
        assert masking.find_packed_sequence_indices is not original
        assert masking.find_packed_sequence_indices(packed).tolist() == [[0, 0, 0, 1, 1, 2]]
        assert notes == []
        with FakeTensorMode() as mode:
            fake = mode.from_tensor(packed)
            assert masking.find_packed_sequence_indices(fake) is None
        assert notes == [PACKING_NOTE]
    assert masking.find_packed_sequence_indices is original


def test_a_trace_of_a_transformers_model_says_what_it_assumed() -> None:
    from gpuplan.trace.run import trace
    from tests.trace_targets.models import hf_llama_checkpointed

    assert PACKING_NOTE in trace(hf_llama_checkpointed, runtime="cpu", steps=1).notes
