"""The tensor sizes of one micro-batch on one GPU, after tensor and sequence splits."""

from gpuplan.core.memory.architecture import Architecture
from gpuplan.core.record import Record


class Dims(Record, kw_only=True):
    """Element counts (not bytes) of the tensors a layer handles, on one GPU."""

    batch: int
    seq: int
    tokens: int
    """batch × seq."""

    hidden: float
    """Elements of one residual-stream tensor (tokens × hidden, / TP under sequence parallelism)."""

    hidden_full: float
    """tokens × hidden: a column-parallel layer's input, gathered."""

    query: float
    """tokens × heads × head_dim on this GPU."""

    key: float
    """tokens × kv_heads × head_dim on this GPU (k or v, not repeated)."""

    ffn: float
    """tokens × intermediate_size on this GPU."""

    scores: float
    """batch × heads × seq × seq on this GPU: the attention matrix."""

    lse: float
    """batch × heads × seq: one log-sum-exp per query."""

    logits: float
    """tokens × vocab (divided by TP for a vocab-parallel head)."""

    heads: int
    kv_heads: int


def dims_for(arch: Architecture, batch: int, seq: int, tp: int = 1, sp: bool = False) -> Dims:
    tokens = batch * seq
    heads = max(arch.num_heads // tp, 1)
    kv_heads = max(arch.num_kv_heads // tp, 1)
    head_dim = arch.head_dim
    hidden_full = float(tokens * arch.hidden_size)
    return Dims(
        batch=batch,
        seq=seq,
        tokens=tokens,
        hidden=hidden_full / tp if sp else hidden_full,
        hidden_full=hidden_full,
        query=float(tokens * heads * head_dim),
        key=float(tokens * kv_heads * head_dim),
        ffn=float(tokens * arch.intermediate_size) / tp,
        scores=float(batch * heads) * seq * seq,
        lse=float(batch * heads * seq),
        logits=float(tokens * arch.vocab_size) / tp,
        heads=heads,
        kv_heads=kv_heads,
    )
