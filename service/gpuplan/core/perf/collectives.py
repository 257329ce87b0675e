"""The tensor-parallel all-reduce of a serving step, timed as NCCL's and RCCL's tuners
time a small message (data/collectives.toml).

A serving step all-reduces each layer's output twice, over only the step's tokens: a
decode step of a few sequences moves a few kilobytes, where the start-up of the
collective is everything. :func:`gpuplan.core.perf.comm.all_reduce_seconds` charges the
α-β model's start-up ``α`` at each of a ring's ``2(k−1)`` steps (or a tree's
``2·log2 k``), with ``α`` of the order of a whole collective's latency: at 8 GPUs that is
6x what the libraries' own tuners say. NCCL (and RCCL, its ROCm fork) time an all-reduce
as ``baseLat + nsteps·hwLat + bytes / bandwidth`` per algorithm and protocol and run the
fastest; for these messages that is the LL protocol on a ring: one ``baseLat`` (6.6 µs
NCCL, 12 µs RCCL) and ``2(k−1)`` hops of well under a microsecond over NVLink or
Infinity Fabric, at a quarter of the bus bandwidth. A large message (a long prompt's
chunk) still goes at the full bandwidth of the simple protocol: the step takes the
faster of the two, as the tuner would.
"""

from collections.abc import Callable

from gpuplan.core.perf.collectives_data import Library, collective_libraries
from gpuplan.core.perf.comm import all_reduce_seconds
from gpuplan.core.perf.link import Link


def library_for(vendor: str) -> Library:
    """RCCL on AMD GPUs, NCCL on the others."""
    return "rccl" if vendor == "amd" else "nccl"


def small_all_reduce_seconds(nbytes: float, size: int, link: Link, library: Library) -> float:
    """One all-reduce of ``nbytes`` over ``size`` GPUs on ``link``: the faster of the LL
    ring the library's tuner times for small messages and the bandwidth-bound model of
    :func:`gpuplan.core.perf.comm.all_reduce_seconds` for large ones."""
    return small_all_reduce(size, link, library)(nbytes)


def small_all_reduce(size: int, link: Link, library: Library) -> Callable[[float], float]:
    """:func:`small_all_reduce_seconds` of ``size`` GPUs on ``link`` as a function of the
    message: the LL ring's start-up and bus bandwidth are computed once, for a caller
    that asks for many messages (a serving search times hundreds of engine steps of one
    replica); the bandwidth-bound side stays :func:`all_reduce_seconds`."""
    if size <= 1 or link.kind == "none":
        return _no_reduce
    lib = collective_libraries()[library]
    steps = 2 * (size - 1)
    bus = min(link.bytes_per_s * lib.ll_bandwidth_share, lib.ll_max_bus_bytes_per_s)
    start = lib.base_latency_seconds + steps * lib.hop_latency_seconds[link.kind]
    share = steps / size

    def seconds(nbytes: float) -> float:
        return min(start + share * nbytes / bus, all_reduce_seconds(nbytes, size, link))

    return seconds


def _no_reduce(nbytes: float) -> float:
    """No all-reduce: one GPU, or GPUs with no link."""
    return 0.0
