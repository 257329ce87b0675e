"""Connecting to Redis so that a Redis outage costs a request milliseconds, not seconds.

redis-py's defaults (5 s socket timeout, ten retries) suit a batch job; a readiness
probe or a request path needs a short timeout, one quick retry, and an answer of
"down" rather than an exception when Redis is gone.
"""

import asyncio
from typing import Any, Literal

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

RedisHealth = Literal["ok", "down", "not_configured"]


def connect(url: str, timeout_seconds: float, password: str | None = None) -> "Redis":
    """A client for ``url``; connects lazily, so a down Redis does not stop start-up.

    ``rediss://`` connects over TLS (certificates verified; ``ssl_ca_certs`` and the
    other ``ssl_*`` query arguments of redis-py's URL syntax apply). ``password``, from
    a mounted secret, wins over one in the URL.
    """
    extra: dict[str, Any] = {} if password is None else {"password": password}
    return Redis.from_url(
        url,
        **extra,
        socket_connect_timeout=timeout_seconds,
        socket_timeout=timeout_seconds,
        retry=Retry(ExponentialBackoff(cap=timeout_seconds, base=0.01), retries=1),
        health_check_interval=30,
        decode_responses=False,
    )


async def probe(client: "Redis | None", timeout_seconds: float) -> RedisHealth:
    """Ping Redis within ``timeout_seconds`` overall."""
    if client is None:
        return "not_configured"
    try:
        async with asyncio.timeout(timeout_seconds):
            await client.ping()
    except (RedisError, OSError, TimeoutError):
        return "down"
    return "ok"
