"""Moving a request's KV cache from the prefill worker that computed it to the decode
worker that continues it (disaggregated serving).

The prefill worker's GPUs each hold their tensor-parallel share of every layer's keys and
values; each sends its share straight from its memory to the decode worker's (NIXL over
NVLink inside a node, over RDMA between nodes: Dynamo's ``docs/design_docs/
disagg_serving.md``, commit 66e265b, "NIXL handles the direct GPU-to-GPU transfer using
the optimal available transport (NVLink, InfiniBand/UCX, etc.)"). The shares travel in
parallel, so one request takes ``bytes / min(tp_prefill, tp_decode)`` over one GPU's
link plus one start-up (the α–β model of :mod:`gpuplan.core.perf.comm`). Every request
moves its prompt's cache once, so at ``rate`` requests/s the links carry ``rate ×
bytes``: past their bandwidth the transfer, not the GPUs, bounds the rate.
"""

from typing import NamedTuple

from gpuplan.core.perf.comm import transfer_seconds
from gpuplan.core.perf.link import Link


class KvTransfer(NamedTuple):
    """One request's KV cache moved from a prefill replica to a decode replica."""

    bytes: int
    """The whole prompt's cache, every layer and every tensor-parallel share."""

    seconds: float
    """Time from the prefill's end to the cache being on the decode worker."""

    link: Link
    utilization: float
    """Share of the links' bandwidth the request rate keeps busy (above 1: saturated)."""


def kv_transfer(
    *,
    prompt_tokens: int,
    kv_bytes_per_token: float,
    tp_prefill: int,
    tp_decode: int,
    link: Link,
    requests_per_s: float,
    prefill_gpus: int,
    decode_gpus: int,
) -> KvTransfer:
    """The transfer of one prompt's cache of ``kv_bytes_per_token`` (whole model, all
    layers and shares) per token, at ``requests_per_s`` across all replicas.

    The links in use are those of the side with fewer GPUs: each of its GPUs sends (or
    receives) its share of every request's cache.
    """
    total = int(prompt_tokens * kv_bytes_per_token)
    lanes = max(min(tp_prefill, tp_decode), 1)
    seconds = transfer_seconds(total / lanes, link)
    gpus = max(min(prefill_gpus, decode_gpus), 1)
    if link.kind == "none" or link.bytes_per_s == float("inf"):
        busy = 0.0
    else:
        busy = requests_per_s * total / (gpus * link.bytes_per_s)
    return KvTransfer(bytes=total, seconds=seconds, link=link, utilization=busy)
