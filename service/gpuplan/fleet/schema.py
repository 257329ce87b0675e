"""The Redis schema of the live fleet, version 1: key names and field encoding.

One place names every key, so the agent (writer) and the API (reader) agree by
construction. Layout, for prefix ``gpuplan:v1:`` and node ``n1``::

    gpuplan:v1:node:{n1}                 HASH  node fields, TTL = liveness
    gpuplan:v1:node:{n1}:gpu:<uuid>      HASH  one physical GPU, same TTL
    gpuplan:v1:node:{n1}:mig:<mig-uuid>  HASH  one MIG instance, same TTL
    gpuplan:v1:node:{n1}:bench           HASH  latest benchmark report, same TTL
    gpuplan:v1:nodes                     ZSET  node -> unix time of its last publish
    gpuplan:v1:stream:telemetry          STREAM  capped history of node summaries
    gpuplan:v1:stream:bench              STREAM  capped history of benchmark reports
    gpuplan:v1:events                    PUB/SUB channel, a hint only

``{n1}`` is a Redis Cluster hash tag: every key of one node lands in one slot, so the
node's MULTI block is single-slot on a cluster too. Each hash field holds the JSON
encoding of one Struct field (numbers read as numbers, strings carry quotes), which
keeps types exact across the round trip; docs/agent.md documents the fields.
"""

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import msgspec

from gpuplan.core.errors import DataError
from gpuplan.core.fleet import BenchmarkReport, NodeSnapshot

DEFAULT_PREFIX = "gpuplan:v1:"
SCHEMA_VERSION = 1

# Kubernetes node names are DNS subdomains; braces would break the hash tag.
NODE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$")

T = TypeVar("T", bound=msgspec.Struct)

_encoder = msgspec.json.Encoder()

# Node-hash fields that are not NodeSnapshot fields: member lists and summaries
# for a person reading Redis (and for the telemetry stream).
_NODE_EXTRA = (
    "schema",
    "gpu_uuids",
    "mig_uuids",
    "memory_total_bytes",
    "memory_free_bytes",
    "utilization_ratio_avg",
    "power_watts_sum",
)
_NODE_NESTED = ("gpus", "mig_instances", "benchmark")


class SchemaError(DataError):
    """A hash in Redis does not hold what schema v1 says (written by a foreign tool)."""


def valid_node_name(node: str) -> bool:
    return NODE_NAME.match(node) is not None


class Keys:
    """Key names under one prefix (tests use a prefix of their own)."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = prefix
        self.nodes = f"{prefix}nodes"
        self.telemetry_stream = f"{prefix}stream:telemetry"
        self.bench_stream = f"{prefix}stream:bench"
        self.events = f"{prefix}events"

    def node(self, node: str) -> str:
        return f"{self.prefix}node:{{{node}}}"

    def gpu(self, node: str, uuid: str) -> str:
        return f"{self.node(node)}:gpu:{uuid}"

    def mig(self, node: str, mig_uuid: str) -> str:
        return f"{self.node(node)}:mig:{mig_uuid}"

    def bench(self, node: str) -> str:
        return f"{self.node(node)}:bench"


def to_hash(struct: msgspec.Struct, skip: tuple[str, ...] = ()) -> dict[str, bytes]:
    """A Struct as hash fields, each the JSON of one field; ``None`` fields are left out."""
    out: dict[str, bytes] = {}
    for name in struct.__struct_fields__:
        value = getattr(struct, name)
        if name in skip or value is None:
            continue
        out[name] = _encoder.encode(value)
    return out


def from_hash(fields: Mapping[bytes, bytes], kind: type[T], extra: tuple[str, ...] = ()) -> T:
    """The inverse of :func:`to_hash`.

    Fields the Struct does not have are ignored, so a newer agent may add fields
    within schema v1 while older readers still run (a rolling upgrade). Raises
    :class:`SchemaError` for a hash that is not a valid ``kind``.
    """
    known = set(kind.__struct_fields__) - set(extra)
    values: dict[str, Any] = {}
    try:
        for raw_name, raw_value in fields.items():
            name = raw_name.decode()
            if name in known:
                values[name] = msgspec.json.decode(raw_value)
        return msgspec.convert(values, kind)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise SchemaError(f"not a valid {kind.__name__}: {exc}") from exc


def node_hash(snapshot: NodeSnapshot) -> dict[str, bytes]:
    """The node hash: its scalar fields, member lists and summaries."""
    fields = to_hash(snapshot, skip=_NODE_NESTED)
    live = [g for g in snapshot.gpus if g.up]
    summary: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "gpu_uuids": [g.uuid for g in snapshot.gpus],
        "mig_uuids": [m.mig_uuid for m in snapshot.mig_instances],
        "memory_total_bytes": sum(g.memory_total_bytes or 0 for g in live),
        "memory_free_bytes": sum(g.memory_free_bytes or 0 for g in live),
        "power_watts_sum": sum(g.power_watts or 0.0 for g in live),
    }
    utilization = [g.utilization_ratio for g in live if g.utilization_ratio is not None]
    if utilization:
        summary["utilization_ratio_avg"] = sum(utilization) / len(utilization)
    fields.update({k: _encoder.encode(v) for k, v in summary.items()})
    return fields


def node_members(fields: Mapping[bytes, bytes]) -> tuple[list[str], list[str]]:
    """The GPU and MIG uuids a node hash lists."""
    gpus = msgspec.json.decode(fields.get(b"gpu_uuids", b"[]"), type=list[str])
    migs = msgspec.json.decode(fields.get(b"mig_uuids", b"[]"), type=list[str])
    return gpus, migs


def node_from_hash(fields: Mapping[bytes, bytes]) -> NodeSnapshot:
    return from_hash(fields, NodeSnapshot, extra=_NODE_EXTRA)


def telemetry_entry(snapshot: NodeSnapshot) -> dict[str, bytes]:
    """A telemetry stream entry: the node's scalar fields and summaries, flat."""
    keep = (
        b"node",
        b"ts",
        b"gpu_count",
        b"vendor",
        b"memory_total_bytes",
        b"memory_free_bytes",
        b"utilization_ratio_avg",
        b"power_watts_sum",
    )
    return {k: v for k, v in node_hash(snapshot).items() if k.encode() in keep}


def bench_hash(report: BenchmarkReport) -> dict[str, bytes]:
    return {
        "ts": _encoder.encode(report.ts),
        "status": _encoder.encode(report.status),
        "report": _encoder.encode(report),
    }


def bench_from_hash(fields: Mapping[bytes, bytes]) -> BenchmarkReport | None:
    raw = fields.get(b"report")
    if raw is None:
        return None
    try:
        return msgspec.json.decode(raw, type=BenchmarkReport)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SchemaError(f"not a valid BenchmarkReport: {exc}") from exc
