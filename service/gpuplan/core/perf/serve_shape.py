"""What of a model and its requests a serving replica's speed depends on.

Kept apart from :mod:`gpuplan.core.perf.serve`, which is compiled and so holds no Struct
(docs/architecture.md, "The compiled core").
"""

from gpuplan.core.record import Record


class ServeShape(Record, kw_only=True):
    """What of the model and its requests a replica's speed depends on."""

    prompt_tokens: int
    output_tokens: int
    hidden_size: int
    mlp_width: int
    num_layers: int
    activation_bytes: int
    causal_skip: bool
    """The prefill's attention skips the causal mask's blocks (a fused kernel; see
    :attr:`gpuplan.core.perf.step_records.StepShape.causal_skip`)."""

    weights_bytes: float
    """Weights one GPU of the replica reads each step."""

    kv_bytes_per_token: float
    """KV cache one GPU holds per token of one sequence."""

    token_budget: int
    """Tokens one engine step takes at most, decodes and prompt chunks together
    (vLLM's ``max_num_batched_tokens``)."""

    num_heads: int = 0
    kv_width: int = 0
    """Key (or value) width per token: KV heads x head size."""

    head_dim: int = 0
    """0: attention is not timed from a measured table (MLA, an unknown model)."""

    vocab_size: int = 0
    kv_cache_16bit: bool = False
    """The KV cache is held in 16 bits, as the measured decode attention read it."""
