"""Publishing to Redis without ever making the collection loop wait for it.

The loop hands over its newest snapshot (:meth:`Publisher.offer`) and moves on.
One task publishes; if Redis is down it marks ``redis_connected`` 0, waits with
capped exponential backoff and jitter, and retries with whatever snapshot is newest
by then: node state is idempotent, so an older snapshot is worth nothing once a
newer one exists. A benchmark report published during an outage is not lost: its
stream entry is written with the first snapshot that gets through.
"""

import asyncio
import logging
import random

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gpuplan.agent.state import AgentState
from gpuplan.core.fleet import NodeSnapshot
from gpuplan.fleet.schema import Keys
from gpuplan.fleet.writer import publish

log = logging.getLogger("gpuplan.agent")

BACKOFF_MIN_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 30.0


class Publisher:
    """The single writer of one node's keys."""

    def __init__(
        self,
        client: Redis,
        keys: Keys,
        state: AgentState,
        timeout_seconds: float,
        backoff_max_seconds: float = BACKOFF_MAX_SECONDS,
    ) -> None:
        self.client = client
        self.keys = keys
        self.state = state
        self.timeout_seconds = timeout_seconds
        self.backoff_max_seconds = backoff_max_seconds
        self._latest: NodeSnapshot | None = None
        self._bench_pending = False
        self._wake = asyncio.Event()

    def offer(self, snapshot: NodeSnapshot, new_benchmark: bool) -> None:
        """Make ``snapshot`` the next to publish; returns at once."""
        self._latest = snapshot
        self._bench_pending = self._bench_pending or new_benchmark
        self._wake.set()

    async def publish_now(self) -> bool:
        """One attempt to publish the newest snapshot; True on success."""
        snapshot = self._latest
        if snapshot is None:
            return True
        bench = self._bench_pending
        try:
            async with asyncio.timeout(self.timeout_seconds):
                await publish(self.client, self.keys, snapshot, new_benchmark=bench)
        except (RedisError, OSError, TimeoutError) as exc:
            if self.state.redis_connected or self.state.redis_publish_failures == 0:
                log.warning("publishing to Redis failed, retrying with backoff: %s", exc)
            self.state.redis_connected = False
            self.state.redis_publish_failures += 1
            return False
        if not self.state.redis_connected and self.state.redis_publish_failures:
            log.info("Redis is back; published the newest snapshot")
        self.state.redis_connected = True
        self.state.redis_publishes += 1
        # Clear the flag unless a newer report arrived while this publish was in flight.
        if bench and self._latest is not None and self._latest.benchmark is snapshot.benchmark:
            self._bench_pending = False
        return True

    async def run(self) -> None:
        """Publish each offered snapshot until cancelled."""
        backoff = BACKOFF_MIN_SECONDS
        while True:
            await self._wake.wait()
            self._wake.clear()
            while not await self.publish_now():
                await asyncio.sleep(backoff * random.uniform(0.5, 1.0))  # noqa: S311 - jitter
                backoff = min(backoff * 2, self.backoff_max_seconds)
                self._wake.clear()  # the retry publishes the newest snapshot anyway
            backoff = BACKOFF_MIN_SECONDS
