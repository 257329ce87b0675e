"""Library decisions that read tensor values, answered as a real run answers them.

A fake tensor has a shape but no values, so code that branches on values cannot
take the branch the real run takes. While a trace steps the model, transformers'
checks on fake tensors are answered as for an ordinary batch: one sequence per row,
no padding.

- **Packed sequences.** transformers reads the position ids to detect packed
  sequences (``find_packed_sequence_indices``); on a fake tensor it cannot, keeps a
  packed-sequence mask, and so builds an explicit causal mask and expands the keys and
  values for grouped-query attention, where the real run of an ordinary batch passes
  ``is_causal`` to SDPA and builds neither: a trace with activation checkpointing and
  bf16 autocast was 0.8% high.
- **Padding.** Before it builds a 4-D mask for SDPA, transformers reads the 2-D
  padding mask (``_ignore_causal_mask_sdpa``, ``_ignore_bidirectional_mask_sdpa``): a
  mask of ones needs none (SDPA's ``is_causal`` does it). BART's decoder makes such a
  mask itself (``torch.ones``) when it is given none; on a fake tensor transformers
  cannot read it and built a (batch, 1, tokens, tokens) mask per step that the real run
  never makes: BART's training step traced 1.1% high. A fake padding mask is read as
  ones, by calling the check on a real mask of ones of its shape.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

PACKING_NOTE = (
    "transformers: sequences taken as unpacked (one per batch row), as a real run finds "
    "for ordinary position ids; fake tensors have no values to check"
)
PADDING_NOTE = (
    "transformers: padding masks taken as all ones (no padding), as a real run finds for "
    "an ordinary batch; fake tensors have no values to check"
)


def _unpacked(original: Any, notes: list[str]) -> Any:
    def find_packed_sequence_indices(position_ids: Any) -> Any:
        if isinstance(position_ids, FakeTensor):
            if PACKING_NOTE not in notes:
                notes.append(PACKING_NOTE)
            return None
        return original(position_ids)

    return find_packed_sequence_indices


def _unpadded(original: Any, notes: list[str]) -> Any:
    """``original(padding_mask, ...)`` with a fake mask read as a real mask of ones."""

    def check(padding_mask: Any, *args: Any, **kwargs: Any) -> Any:
        if not isinstance(padding_mask, FakeTensor):
            return original(padding_mask, *args, **kwargs)
        if PADDING_NOTE not in notes:
            notes.append(PADDING_NOTE)
        with _disable_current_modes():  # a real bool, not a tensor the trace records
            ones = torch.ones(tuple(padding_mask.shape), dtype=torch.bool)
            return bool(original(ones, *args, **kwargs))

    return check


_PATCHES = {
    "find_packed_sequence_indices": _unpacked,
    "_ignore_causal_mask_sdpa": _unpadded,
    "_ignore_bidirectional_mask_sdpa": _unpadded,
}


@contextmanager
def ordinary_batches() -> Iterator[list[str]]:
    """Patch what is imported now (the target's build has run): transformers' checks of
    packing and padding on fake tensors answer as for an ordinary batch. Yields the notes
    the trace should carry: which assumptions were used."""
    notes: list[str] = []
    masking = sys.modules.get("transformers.masking_utils")
    originals = {name: getattr(masking, name, None) for name in _PATCHES} if masking else {}
    try:
        for name, original in originals.items():
            if original is not None:
                setattr(masking, name, _PATCHES[name](original, notes))
        yield notes
    finally:
        for name, original in originals.items():
            if original is not None:
                setattr(masking, name, original)
