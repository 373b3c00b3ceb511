"""The bench's taskq App: no-op, counting, time-stamping and lease-holding handlers, sync
and async.

Worker processes load it with `taskq worker --app bench.tasks:app`; the bench itself
builds its own App on the queue of each run with `make_app`.
"""

from __future__ import annotations

import asyncio
import threading
import time

import redis
import redis.asyncio as aioredis

from bench.tally import tick
from taskq import App, Settings

COUNTER_KEY = "bench:counter"
# Starts a second of bench.noop_limited, well under what an unlimited drain reaches.
LIMITED_RATE = 1000
# A tenth of a second of starts at once: limited tasks come back from delayed a
# maintenance turn (20-100 ms) at a time, and with a burst of 1 only one of them may
# start per spacing, whatever their number.
LIMITED_BURST = 100
STAMPS_KEY = "bench:stamps"

_local = threading.local()
_async_clients: dict[int, aioredis.Redis] = {}


def _client() -> redis.Redis:
    """One client per handler thread, on the worker's own REDIS_URL."""
    client: redis.Redis | None = getattr(_local, "client", None)
    if client is None:
        client = redis.Redis.from_url(Settings.from_env().redis_url)
        _local.client = client
    return client


def _async_client() -> aioredis.Redis:
    """One asyncio client per event loop (a worker has one for its async handlers)."""
    loop_id = id(asyncio.get_running_loop())
    client = _async_clients.get(loop_id)
    if client is None:
        client = aioredis.Redis.from_url(Settings.from_env().redis_url)
        _async_clients[loop_id] = client
    return client


def make_app(queue: str | None = None, settings: Settings | None = None) -> App:
    """An App with every bench handler registered under a fixed name."""
    app = App(queue=queue, settings=settings)
    _no_ops(app)
    _counted(app)
    _timed(app)
    _held(app)
    return app


def _no_ops(app: App) -> None:
    @app.task("bench.noop_async")
    async def noop_async() -> None:
        """Does nothing: what is left is the queue's own cost."""

    @app.task("bench.noop_sync")
    def noop_sync() -> None:
        """Does nothing, on a handler thread."""

    @app.task("bench.keep_sync")
    def keep_sync(data: str) -> None:
        """Does nothing with its argument: the memory bench's task, kept when it is done."""

    @app.task("bench.noop_async_unkept", store_result=False)
    async def noop_async_unkept() -> None:
        """The async no-op with results off: what storing its result costs is the gap."""

    @app.task("bench.noop_sync_unkept", store_result=False)
    def noop_sync_unkept() -> None:
        """The `def` no-op with results off."""

    if app.layout is not None:
        return  # a sharded queue refuses rate limits (bench.shards drains one)

    @app.task("bench.noop_limited", rate_limit=f"{LIMITED_RATE}/s", rate_burst=LIMITED_BURST)
    async def noop_limited() -> None:
        """The async no-op under a rate limit: the drain should keep to the rate."""


def _timed(app: App) -> None:
    @app.task("bench.clock_async")
    async def clock_async() -> float:
        """Returns the time it returned at, for how soon a waiting producer has it."""
        return time.time()

    @app.task("bench.clock_sync")
    def clock_sync() -> float:
        """Returns the time it returned at, on a handler thread."""
        return time.time()

    @app.task("bench.stamp_async")
    async def stamp_async(tag: str) -> None:
        """Records when the handler started, for pickup latency."""
        started = time.time()
        await _async_client().rpush(STAMPS_KEY, f"{tag} {started!r}")

    @app.task("bench.stamp_sync")
    def stamp_sync(tag: str) -> None:
        """Records when the handler started, on a handler thread."""
        started = time.time()
        _client().rpush(STAMPS_KEY, f"{tag} {started!r}")


def _held(app: App) -> None:
    @app.task("bench.hold_async")
    async def hold_async(seconds: float) -> None:
        """Holds its lease for `seconds` on the worker's event loop: a long-running task
        that costs its worker only its heartbeats."""
        await asyncio.sleep(seconds)

    @app.task("bench.hold_sync")
    def hold_sync(seconds: float) -> None:
        """Holds its lease and a handler thread for `seconds`."""
        time.sleep(seconds)


def _counted(app: App) -> None:
    @app.task("bench.tally_async")
    async def tally_async() -> None:
        """The peers' counted no-op: one byte appended to the run's tally file."""
        tick()

    @app.task("bench.tally_sync")
    def tally_sync() -> None:
        """The peers' counted no-op on a handler thread."""
        tick()

    @app.task("bench.count_async")
    async def count_async() -> None:
        """The peers' no-op as it was first counted: one INCR of a shared counter."""
        await _async_client().incr(COUNTER_KEY)

    @app.task("bench.count_sync")
    def count_sync() -> None:
        """The INCR-counted no-op on a handler thread."""
        _client().incr(COUNTER_KEY)


app = make_app()
