"""Publishing one node snapshot: every write in one pipelined round trip.

The node's keys are replaced, not merged (DEL then HSET), so a field that became
``None`` or a MIG instance that was destroyed does not linger, and each key gets
its TTL in the same MULTI block so no reader ever sees a hash without one. A
stopped agent's keys expire after ``ttl_seconds``: a missing node hash means the
node is stale, never that it has zero GPUs.
"""

import math
import time
from typing import Any

import msgspec
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from gpuplan.core.fleet import NodeSnapshot
from gpuplan.fleet.schema import (
    Keys,
    bench_hash,
    node_hash,
    telemetry_entry,
    to_hash,
)

TELEMETRY_STREAM_MAXLEN = 100_000
BENCH_STREAM_MAXLEN = 10_000
# Index entries older than this are pruned by the writers; readers never write.
INDEX_HORIZON_SECONDS = 86_400.0


FleetClient = Redis | RedisCluster


async def publish(
    client: FleetClient,
    keys: Keys,
    snapshot: NodeSnapshot,
    *,
    new_benchmark: bool,
    telemetry_maxlen: int = TELEMETRY_STREAM_MAXLEN,
    bench_maxlen: int = BENCH_STREAM_MAXLEN,
) -> None:
    """Write ``snapshot``; ``new_benchmark`` also appends its report to the benchmark
    stream and announces it. Raises redis errors to the caller.

    On one Redis: one MULTI block, one round trip. On a Redis Cluster the node's keys
    share a slot (their hash tag) and go in one MULTI block on that slot; the global
    index and streams live in other slots and follow in a second pipeline, then the
    event (redis-py's cluster pipeline refuses PUBLISH).
    """
    node_ops, global_ops = _operations(
        keys, snapshot, new_benchmark, telemetry_maxlen, bench_maxlen
    )
    if isinstance(client, RedisCluster):
        async with client.pipeline(transaction=True) as pipe:
            _queue(pipe, node_ops)
            await pipe.execute()
        queued = [op for op in global_ops if op[0] != "publish"]
        async with client.pipeline(transaction=False) as pipe:
            _queue(pipe, queued)
            await pipe.execute()
        for _, args, _ in (op for op in global_ops if op[0] == "publish"):
            await client.publish(*args)  # cluster pipelines refuse PUBLISH
        return
    async with client.pipeline(transaction=True) as pipe:
        _queue(pipe, [*node_ops, *global_ops])
        await pipe.execute()


# A queued command: pipeline method name, positional and keyword arguments.
Op = tuple[str, tuple[Any, ...], dict[str, Any]]


def _queue(pipe: Any, ops: list[Op]) -> None:
    for name, args, kwargs in ops:
        getattr(pipe, name)(*args, **kwargs)


def _operations(
    keys: Keys,
    snapshot: NodeSnapshot,
    new_benchmark: bool,
    telemetry_maxlen: int,
    bench_maxlen: int,
) -> tuple[list[Op], list[Op]]:
    """The commands of one publish: those on the node's slot, and the global ones."""
    node = snapshot.node
    ttl = max(1, math.ceil(snapshot.ttl_seconds))
    writes: list[tuple[str, dict[str, bytes]]] = [(keys.node(node), node_hash(snapshot))]
    writes += [(keys.gpu(node, g.uuid), to_hash(g)) for g in snapshot.gpus]
    writes += [(keys.mig(node, m.mig_uuid), to_hash(m)) for m in snapshot.mig_instances]
    node_ops: list[Op] = []
    if snapshot.benchmark is not None:
        writes.append((keys.bench(node), bench_hash(snapshot.benchmark)))
    else:
        node_ops.append(("delete", (keys.bench(node),), {}))
    for key, fields in writes:
        node_ops.append(("delete", (key,), {}))
        node_ops.append(("hset", (key,), {"mapping": fields}))
        node_ops.append(("expire", (key, ttl), {}))
    horizon = f"({time.time() - INDEX_HORIZON_SECONDS}"
    entry = telemetry_entry(snapshot)
    stream = {"maxlen": telemetry_maxlen, "approximate": True}
    global_ops: list[Op] = [
        ("zadd", (keys.nodes, {node: snapshot.ts}), {}),
        ("zremrangebyscore", (keys.nodes, "-inf", horizon), {}),
        ("xadd", (keys.telemetry_stream, entry), stream),
    ]
    event = {"type": "node_update", "node": node, "ts": snapshot.ts}
    if new_benchmark and snapshot.benchmark is not None:
        bench_entry = {"node": node.encode(), **bench_hash(snapshot.benchmark)}
        bench_stream = {"maxlen": bench_maxlen, "approximate": True}
        global_ops.append(("xadd", (keys.bench_stream, bench_entry), bench_stream))
        event["type"] = "bench_done"
    global_ops.append(("publish", (keys.events, msgspec.json.encode(event)), {}))
    return node_ops, global_ops
