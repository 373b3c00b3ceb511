"""The peers' no-op body, counted one of two ways ($BENCH_BODY): `tally` appends a byte
to the run's tally file (bench/tally.py); `incr` INCRs the run's Redis counter on a
client per process, as the bench first counted."""

from __future__ import annotations

import asyncio
import os

import redis
import redis.asyncio as aioredis

from bench.tally import tick

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
QUEUE = os.environ.get("BENCH_QUEUE", "bench")
COUNTER = os.environ.get("BENCH_COUNTER", "bench:counter")
BODY = os.environ.get("BENCH_BODY", "tally")

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


def count_run() -> None:
    """The body of a peer's `def` no-op."""
    if BODY == "incr":
        incr()
    else:
        tick()


async def acount_run() -> None:
    """The body of a peer's `async def` no-op."""
    if BODY == "incr":
        await aincr()
    else:
        tick()
