"""Communication model: which link a group of GPUs talks over, and ring collectives.

A ring all-reduce of ``B`` bytes over ``k`` GPUs sends ``2(k−1)/k · B`` bytes out of
every GPU (reduce-scatter, then all-gather) in ``2(k−1)`` steps, so it takes
``2(k−1)/k · B / bw + 2(k−1)·α`` where ``bw`` is the per-direction bandwidth of the
slowest link in the ring and ``α`` the start-up latency of a step (the α-β model;
Thakur et al. 2005, as NCCL's rings implement it). A reduce-scatter or all-gather
alone is half of that.

Links come from the catalog: NVLink / Infinity Fabric per direction inside its
domain (``max_gpus``; a bridge joins 2), PCIe per direction otherwise, and the
inter-node network for a group that spans nodes. Tensor parallelism over PCIe is
therefore slow by the numbers, not by a fudge factor: its per-layer all-reduces see
a link 10-30x slower than NVLink. Small all-reduces take the tree's ``2·log2 k``
start-ups instead of the ring's ``2(k−1)`` (NCCL chooses between them by size).
"""

import math

from gpuplan.core.catalog import GpuSpec
from gpuplan.core.perf.efficiency import efficiency_data
from gpuplan.core.perf.link import Link


def group_link(gpu: GpuSpec, size: int, *, gpus_per_node: int, network_bytes_per_s: float) -> Link:
    """The slowest link a ring of ``size`` GPUs of this model crosses.

    Inside one scale-up domain (``gpu_link.max_gpus``) the ring runs over NVLink or
    Infinity Fabric; otherwise inside a node over PCIe; a ring that spans nodes also
    crosses the network, whose NICs hang off PCIe, so it runs at the slowest of them.
    """
    lat = efficiency_data().latency
    if size <= 1:
        return Link(kind="none", bytes_per_s=float("inf"), latency_s=0.0)
    pcie = gpu.interconnect.pcie
    pcie_bw = float(pcie.per_direction_bytes_per_s) if pcie else network_bytes_per_s
    nv = gpu.interconnect.gpu_link
    if nv is not None and size <= nv.max_gpus:
        return Link(
            kind="nvlink",
            bytes_per_s=float(nv.per_direction_bytes_per_s),
            latency_s=lat.nvlink_seconds,
        )
    if size <= gpus_per_node:
        return Link(kind="pcie", bytes_per_s=pcie_bw, latency_s=lat.pcie_seconds)
    return Link(
        kind="network",
        bytes_per_s=min(network_bytes_per_s, pcie_bw),
        latency_s=lat.network_seconds,
    )


def all_reduce_seconds(nbytes: float, size: int, link: Link) -> float:
    """All-reduce of ``nbytes`` (the message each GPU holds) over ``size`` GPUs: the
    faster of a ring and a tree, as NCCL picks per message size.

    The ring moves the fewest bytes but pays ``2(k−1)`` start-ups; a (double binary)
    tree sends the whole message up and down in ``2·log2 k`` steps, so it wins on the
    small messages of decode steps and of narrow models.
    """
    if size <= 1 or nbytes <= 0:
        return 0.0
    ring = 2 * (size - 1) / size * nbytes / link.bytes_per_s + 2 * (size - 1) * link.latency_s
    tree = 2 * nbytes / link.bytes_per_s + 2 * math.ceil(math.log2(size)) * link.latency_s
    return min(ring, tree)


def all_gather_seconds(nbytes: float, size: int, link: Link) -> float:
    """Ring all-gather (or reduce-scatter) producing ``nbytes`` on every GPU."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    return (size - 1) / size * nbytes / link.bytes_per_s + (size - 1) * link.latency_s


def all_to_all_seconds(
    nbytes: float, size: int, link: Link, *, local: int = 1, local_link: Link | None = None
) -> float:
    """All-to-all of ``nbytes`` each GPU holds, an equal share for each of ``size`` ranks,
    ``local`` of which (the GPU itself among them) share its scale-up domain and talk
    over ``local_link``; the rest over ``link``.

    PyTorch runs ``all_to_all_single`` over NCCL as one group of point-to-point sends
    and receives, one pair per peer (``ncclGroupStart``, ``ncclSend``/``ncclRecv`` for
    each rank, ``ncclGroupEnd``: torch/csrc/cuda/nccl.cpp, ``all2all_single_unequal_split``,
    pytorch/pytorch at 0033e7747d47), which NCCL runs at once: the shares for peers in
    the domain cross NVLink while the others cross the network, so the slower of the
    two sets the time (:func:`split_seconds`). A group inside one domain
    (``local >= size``) is the ring's ``(k-1)/k`` of the bytes over ``link``, as
    :func:`all_gather_seconds`."""
    if size <= 1 or nbytes <= 0:
        return 0.0
    local = min(max(local, 1), size)
    if local == size or local_link is None:
        return all_gather_seconds(nbytes, size, link)
    share = nbytes / size
    return exchange_seconds((local - 1) * share, local_link, (size - local) * share, link, size)


def exchange_seconds(
    near_bytes: float, near: Link, far_bytes: float, far: Link, ranks: int
) -> float:
    """What a GPU sends in one exchange among ``ranks``: ``near_bytes`` to peers in its
    domain over ``near`` and, at the same time, ``far_bytes`` to other nodes over
    ``far`` (:func:`split_seconds`; none: ``near`` alone), with a start-up of ``far``'s
    latency per peer."""
    seconds = (
        split_seconds(near_bytes, near, far_bytes, far)
        if far_bytes > 0
        else near_bytes / near.bytes_per_s
    )
    return seconds + (ranks - 1) * far.latency_s


def split_seconds(near_bytes: float, near: Link, far_bytes: float, far: Link) -> float:
    """Bytes for peers in the GPU's node over ``near`` and, at the same time, bytes for
    other nodes over the network ``far``: the slower of the two. Over PCIe (no NVLink)
    both sets leave through the GPU's one PCIe link, which the NICs hang off too, so it
    carries their sum."""
    seconds = max(near_bytes / near.bytes_per_s, far_bytes / far.bytes_per_s)
    if near.kind == "pcie":
        seconds = max(seconds, (near_bytes + far_bytes) / near.bytes_per_s)
    return seconds


def transfer_seconds(nbytes: float, link: Link) -> float:
    """A point-to-point send (pipeline stages)."""
    if nbytes <= 0 or link.kind == "none":
        return 0.0
    return nbytes / link.bytes_per_s + link.latency_s
