"""Publishing one node snapshot: every write in one pipelined round trip.

The node's keys are replaced, not merged (DEL then HSET), so a field that became
``None`` or a MIG instance that was destroyed does not linger, and each key gets
its TTL in the same MULTI block so no reader ever sees a hash without one. A
stopped agent's keys expire after ``ttl_seconds``: a missing node hash means the
node is stale, never that it has zero GPUs.
"""

import math
import time

import msgspec
from redis.asyncio import Redis

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


async def publish(
    client: Redis,
    keys: Keys,
    snapshot: NodeSnapshot,
    *,
    new_benchmark: bool,
    telemetry_maxlen: int = TELEMETRY_STREAM_MAXLEN,
    bench_maxlen: int = BENCH_STREAM_MAXLEN,
) -> None:
    """Write ``snapshot`` in one round trip; ``new_benchmark`` also appends its report
    to the benchmark stream and announces it. Raises redis errors to the caller."""
    node = snapshot.node
    ttl = max(1, math.ceil(snapshot.ttl_seconds))
    async with client.pipeline(transaction=True) as pipe:
        writes: list[tuple[str, dict[str, bytes]]] = [(keys.node(node), node_hash(snapshot))]
        writes += [(keys.gpu(node, g.uuid), to_hash(g)) for g in snapshot.gpus]
        writes += [(keys.mig(node, m.mig_uuid), to_hash(m)) for m in snapshot.mig_instances]
        if snapshot.benchmark is not None:
            writes.append((keys.bench(node), bench_hash(snapshot.benchmark)))
        else:
            pipe.delete(keys.bench(node))
        for key, fields in writes:
            pipe.delete(key)
            pipe.hset(key, mapping=fields)  # type: ignore[arg-type]
            pipe.expire(key, ttl)
        pipe.zadd(keys.nodes, {node: snapshot.ts})
        pipe.zremrangebyscore(keys.nodes, "-inf", f"({time.time() - INDEX_HORIZON_SECONDS}")
        pipe.xadd(
            keys.telemetry_stream,
            telemetry_entry(snapshot),  # type: ignore[arg-type]
            maxlen=telemetry_maxlen,
            approximate=True,
        )
        event = {"type": "node_update", "node": node, "ts": snapshot.ts}
        if new_benchmark and snapshot.benchmark is not None:
            pipe.xadd(
                keys.bench_stream,
                {"node": node, **bench_hash(snapshot.benchmark)},  # type: ignore[dict-item]
                maxlen=bench_maxlen,
                approximate=True,
            )
            event["type"] = "bench_done"
        pipe.publish(keys.events, msgspec.json.encode(event))
        await pipe.execute()
