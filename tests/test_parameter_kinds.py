"""``distinct``: each layer record once, by identity, in the order first seen."""

from gpuplan.core.memory.parameters import LayerParameters, distinct


def test_the_kinds_of_layer_are_told_by_identity_in_order() -> None:
    dense = LayerParameters(attention=4, mlp=8, norms=2, active_mlp=8)
    equal = LayerParameters(attention=4, mlp=8, norms=2, active_mlp=8)  # same values
    sparse = LayerParameters(attention=4, mlp=64, norms=2, active_mlp=16)
    assert distinct([dense] * 80) == [dense]  # one kind: the one-pass case
    assert distinct([dense, sparse, dense, sparse]) == [dense, sparse]
    assert distinct([sparse, dense] + [dense] * 3) == [sparse, dense]
    kinds = distinct([dense, equal, dense])  # equal values, two records: two kinds
    assert len(kinds) == 2
    assert kinds[0] is dense
    assert kinds[1] is equal
    assert distinct([]) == []
