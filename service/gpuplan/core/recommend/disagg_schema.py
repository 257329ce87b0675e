"""The answer's aggregated-versus-disaggregated comparison of a serving candidate
(``inference.compare_disaggregated``; docs/serving.md). Apart from
:mod:`gpuplan.core.recommend.schema` so the comparison stays one concept in one place."""

from typing import Literal

from gpuplan.core.record import Record

ServingMode = Literal["aggregated", "disaggregated"]


class ServingSide(Record, kw_only=True):
    """One way to serve the request rate on the candidate's GPU model."""

    gpus: int
    usd_per_hour: float | None
    """All its GPUs at the candidate's price per GPU-hour (None: no price)."""

    time_to_first_token_s: float
    time_per_output_token_s: float
    requests_per_s: float
    """Requests per second all its replicas complete at the planned concurrency."""

    meets_targets: bool
    """It keeps every latency target and serves the rate."""

    missed: list[str] = []
    """The targets it misses (request field names), and ``inference.requests_per_second``
    when its replicas fall short of the rate."""

    time_to_first_token_p95_s: float | None = None
    """With ``inference.slo``: the 95th percentile of the time to first token under
    Poisson arrivals at the rate (disaggregated: the prefill pool's queue and batch, the
    transfer, and the decode pool's admission; docs/serving.md). None without an SLO, or
    past what the replicas serve."""

    time_per_output_token_p95_s: float | None = None
    """With ``inference.slo``: the 95th percentile of the time per output token under the
    rate (disaggregated: the decode pool's steps, which carry no prompt chunks)."""


class ServingPool(Record, kw_only=True):
    """The prefill or the decode pool of a disaggregated plan."""

    role: Literal["prefill", "decode"]
    replicas: int
    tensor_parallel: int
    """Tensor-parallel GPUs of one replica (1 for an expert-parallel one)."""

    expert_parallel: int = 1
    """Expert-parallel ranks of one replica, each a data-parallel attention rank with its
    own sequences (its GPUs: ``tensor_parallel`` x ``expert_parallel``)."""

    gpus: int
    concurrency: int
    """Decode: sequences in flight per replica. Prefill: prompts in one prefill batch."""

    requests_per_s: float
    """Requests per second one replica completes (its phase of them)."""

    busy: float
    """The requested rate over what the pool's replicas can do: the rest is what whole
    replicas round up."""


class KvCacheTransfer(Record, kw_only=True):
    """Each request's prompt cache moved from a prefill to a decode replica."""

    bytes_per_request: int
    """Prompt tokens × the model's KV cache bytes per token (all layers, all shares)."""

    link: Literal["nvlink", "pcie", "network", "none"]
    """NVLink when the whole deployment sits in one scale-up domain, else the network
    (RDMA) between nodes, or PCIe inside a node without NVLink."""

    seconds: float
    """α + bytes / (the link's bandwidth × the GPUs that send in parallel)."""

    link_utilization: float
    """Share of the links' bandwidth the rate keeps busy (above 1: the links bound the rate)."""


class Disaggregation(Record, kw_only=True):
    """One pool with prefill and decode together against separate prefill and decode
    pools (xPyD) on the candidate's GPU model, for the same targets and rate."""

    requests_per_s: float
    """The rate both are sized for: ``inference.requests_per_second``, else what the
    aggregated candidate serves."""

    aggregated: ServingSide
    disaggregated: ServingSide | None
    """None when the engine or the plan cannot be disaggregated (``why`` says why)."""

    ratio: str | None
    """``xPyD``: x prefill replicas, y decode replicas."""

    prefill: ServingPool | None
    decode: ServingPool | None
    kv_transfer: KvCacheTransfer | None
    winner: ServingMode
    """The one that keeps the targets at the lower price per hour (fewer GPUs without a
    price); aggregated on a tie, being one pool to run."""

    why: str
    """What decides it, in words, from the figures above."""
