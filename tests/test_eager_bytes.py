"""An eager layer's memory-bound bytes are counted from the model's code
(bench/kernels/eager_bytes.py), and the shipped constants are that count."""

import pytest
from bench.kernels import eager_bytes

from gpuplan.core.perf.efficiency import efficiency_data
from gpuplan.core.perf.step import eager_layer_bytes


@pytest.mark.slow
@pytest.mark.torch
def test_shipped_eager_bytes_are_the_count_of_transformers_llama() -> None:
    """Recounting the Llama layer's aten operators on the CPU gives the constants
    efficiency.toml ships (to the tenth it rounds them to): a change to the count, or
    to transformers' Llama, fails here until the table is rewritten."""
    pytest.importorskip("transformers")
    counted = eager_bytes.constants()
    shipped = eager_bytes.shipped()
    names = ("eager_hidden_bytes", "eager_kv_bytes", "eager_mlp_bytes")
    for name, value in zip(names, counted, strict=True):
        assert shipped[name] == pytest.approx(value, abs=0.5), name


def test_the_count_is_linear_in_the_three_widths() -> None:
    """Per token per layer: hidden size, key/value width and MLP width each at its own
    count; an unknown key/value width (0) is the hidden size (multi-head attention)."""
    k = efficiency_data().kernels
    h, kv, m = 4096, 1024, 14336
    assert eager_layer_bytes(h, kv, m, k) == pytest.approx(
        h * k.eager_hidden_bytes + kv * k.eager_kv_bytes + m * k.eager_mlp_bytes
    )
    assert eager_layer_bytes(h, 0, m, k) == eager_layer_bytes(h, h, m, k)
    # grouped-query attention moves fewer bytes than multi-head at the same width
    assert eager_layer_bytes(h, kv, m, k) < eager_layer_bytes(h, h, m, k)
