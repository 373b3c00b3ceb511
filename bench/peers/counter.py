"""The peers' no-op body: one INCR of the run's counter, on a client per process."""

from __future__ import annotations

import asyncio
import os

import redis
import redis.asyncio as aioredis

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("BENCH_QUEUE", "bench")
COUNTER = os.environ.get("BENCH_COUNTER", "bench:counter")

# Keyed by process (pool workers fork) and, for asyncio, by event loop.
_clients: dict[int, redis.Redis] = {}
_async_clients: dict[tuple[int, int], aioredis.Redis] = {}


def incr() -> None:
    client = _clients.get(os.getpid())
    if client is None:
        client = _clients[os.getpid()] = redis.Redis.from_url(URL)
    client.incr(COUNTER)


async def aincr() -> None:
    key = (os.getpid(), id(asyncio.get_running_loop()))
    client = _async_clients.get(key)
    if client is None:
        client = _async_clients[key] = aioredis.Redis.from_url(URL)
    await client.incr(COUNTER)
