"""Reading the live fleet: the nodes whose hashes have not expired.

The index (a sorted set, so no SCAN) names candidates; a candidate whose node hash
is gone has missed its TTL and is stale, so it is left out. A GPU or MIG hash that
expired between the two reads is left out the same way. Two round trips for any
number of nodes: all node hashes, then all their member hashes, each pipelined.
"""

import logging
import time
from collections.abc import Iterator

from gpuplan.core.fleet import GpuTelemetry, MigInstance, NodeSnapshot
from gpuplan.fleet.schema import (
    Keys,
    SchemaError,
    bench_from_hash,
    from_hash,
    node_from_hash,
    node_members,
    valid_node_name,
)
from gpuplan.fleet.writer import INDEX_HORIZON_SECONDS, FleetClient

log = logging.getLogger("gpuplan.fleet")


class FleetStore:
    """Read access to the fleet schema under one key prefix."""

    def __init__(self, client: FleetClient, keys: Keys | None = None) -> None:
        self.client = client
        self.keys = keys or Keys()

    async def node_names(self) -> list[str]:
        """Nodes that published within the index horizon (live or not yet pruned)."""
        since = time.time() - INDEX_HORIZON_SECONDS
        names = await self.client.zrangebyscore(self.keys.nodes, since, "+inf")
        return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in names)

    async def nodes(self) -> list[NodeSnapshot]:
        """Every live node, sorted by name."""
        return await self._read([n for n in await self.node_names() if valid_node_name(n)])

    async def node(self, name: str) -> NodeSnapshot | None:
        """One live node, or None when it is unknown or stale."""
        if not valid_node_name(name):
            return None
        found = await self._read([name])
        return found[0] if found else None

    async def mig_instances(self) -> list[MigInstance]:
        """Every MIG instance on live nodes, by node, GPU index and placement: what a
        MIG slice query packs against (``in_use`` says which are taken)."""
        instances = [m for node in await self.nodes() for m in node.mig_instances]
        return sorted(
            instances, key=lambda m: (m.node, m.gpu_index, m.placement_start or 0, m.mig_uuid)
        )

    async def _read(self, names: list[str]) -> list[NodeSnapshot]:
        if not names:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(self.keys.node(name))
            heads = await pipe.execute()
        live = [(name, fields) for name, fields in zip(names, heads, strict=True) if fields]
        if not live:
            return []
        members = [node_members(fields) for _, fields in live]
        async with self.client.pipeline(transaction=False) as pipe:
            for (name, _), (gpus, migs) in zip(live, members, strict=True):
                for uuid in gpus:
                    pipe.hgetall(self.keys.gpu(name, uuid))
                for uuid in migs:
                    pipe.hgetall(self.keys.mig(name, uuid))
                pipe.hgetall(self.keys.bench(name))
            bodies = iter(await pipe.execute())
        out: list[NodeSnapshot] = []
        for (name, fields), (gpus, migs) in zip(live, members, strict=True):
            gpu_hashes, mig_hashes = _take(bodies, len(gpus)), _take(bodies, len(migs))
            bench_hash = next(bodies)
            try:
                node = node_from_hash(fields)
                node.gpus = [from_hash(h, GpuTelemetry) for h in gpu_hashes if h]
                node.mig_instances = [from_hash(h, MigInstance) for h in mig_hashes if h]
                node.benchmark = bench_from_hash(bench_hash)
            except SchemaError as exc:
                # One malformed node must not hide the rest of the fleet.
                log.warning("skipping node %s: %s", name, exc)
                continue
            out.append(node)
        return out


def _take(items: Iterator[dict[bytes, bytes]], count: int) -> list[dict[bytes, bytes]]:
    return [next(items) for _ in range(count)]
