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


def test_fake_padding_masks_are_ones_real_ones_are_read() -> None:
    """transformers skips SDPA's 4-D mask for a padding mask of ones; a fake one is read
    as such (BART's decoder makes one itself), a real one with padding is not."""
    from gpuplan.trace.values import PADDING_NOTE

    padded = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    causal, bidirectional = (
        masking._ignore_causal_mask_sdpa,
        masking._ignore_bidirectional_mask_sdpa,
    )
    with ordinary_batches() as notes:
        assert masking._ignore_causal_mask_sdpa is not causal
        assert not masking._ignore_causal_mask_sdpa(padded, 3, 3, 0, 0)
        assert not masking._ignore_bidirectional_mask_sdpa(padded, 3)
        assert notes == []
        with FakeTensorMode() as mode:
            fake = mode.from_tensor(torch.ones(2, 3, dtype=torch.bool))
            assert causal(fake, 3, 3, 0, 0) is False  # transformers' own answer: unreadable
            assert masking._ignore_causal_mask_sdpa(fake, 3, 3, 0, 0) is True
            assert masking._ignore_bidirectional_mask_sdpa(fake, 3) is True
            assert masking._ignore_causal_mask_sdpa(fake, 2, 3, 0, 0) is False  # as for ones
        assert notes == [PADDING_NOTE]
    assert masking._ignore_causal_mask_sdpa is causal
    assert masking._ignore_bidirectional_mask_sdpa is bidirectional
