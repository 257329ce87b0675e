"""Library decisions that read tensor values, answered as a real run answers them.

A fake tensor has a shape but no values, so code that branches on values cannot
take the branch the real run takes. transformers detects packed sequences by
reading the position ids (``find_packed_sequence_indices``); on a fake tensor it
cannot, keeps a packed-sequence mask, and so builds an explicit causal mask and
expands the keys and values for grouped-query attention, where the real run of an
ordinary batch (one sequence per row) passes ``is_causal`` to SDPA and builds
neither: a trace with activation checkpointing and bf16 autocast was 0.8% high.
While a trace steps the model, the answer for a fake tensor is that of an ordinary
batch: not packed.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch._subclasses.fake_tensor import FakeTensor

PACKING_NOTE = (
    "transformers: sequences taken as unpacked (one per batch row), as a real run finds "
    "for ordinary position ids; fake tensors have no values to check"
)


@contextmanager
def ordinary_batches() -> Iterator[list[str]]:
    """Patch what is imported now (the target's build has run): transformers' packed
    sequence detection says "not packed" for fake position ids. Yields the notes the
    trace should carry: which assumptions were used."""
    notes: list[str] = []
    masking = sys.modules.get("transformers.masking_utils")
    original = getattr(masking, "find_packed_sequence_indices", None)
    if masking is None or original is None:
        yield notes
        return

    def find_packed_sequence_indices(position_ids: Any) -> Any:
        if isinstance(position_ids, FakeTensor):
            if not notes:
                notes.append(PACKING_NOTE)
            return None
        return original(position_ids)

    setattr(masking, "find_packed_sequence_indices", find_packed_sequence_indices)  # noqa: B010
    try:
        yield notes
    finally:
        setattr(masking, "find_packed_sequence_indices", original)  # noqa: B010
