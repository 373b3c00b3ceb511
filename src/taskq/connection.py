"""Builds the Redis client every taskq component uses, from `Settings`."""

from __future__ import annotations

from typing import Any, TypeAlias

import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.connection import HiredisRespSerializer
from redis.retry import Retry
from redis.utils import HIREDIS_AVAILABLE

from taskq.settings import Settings
from taskq.transport import Client
from taskq.transport.keeping import KeepingPool

AsyncClient: TypeAlias = redis.asyncio.Redis | AsyncRedisCluster
"""A client `connect_async()` makes and `AsyncBroker` accepts: one node, or a cluster."""

# Brief blips are retried by the client itself, three times with a growing pause.
RETRIES = 3
# Connections one client keeps open at most. A call that finds every one in use (a
# worker of many handler threads each asking for its effect, a web app with many
# result() waits) waits up to REDIS_TIMEOUT_SECONDS for one to come free, rather
# than failing at once as redis-py's default pool of 100 does.
MAX_CONNECTIONS = 1000


class TextArgsPacker(HiredisRespSerializer):
    """hiredis's command packer, handed numbers as text. hiredis 3.5's pack_command
    crashes the process (SIGSEGV) when a signal handler raises, as Ctrl-C's does, while
    it turns a number into text, and every script call taskq makes carries numbers:
    a Ctrl-C in the middle of an enqueue ended the program with a segfault."""

    def pack(self, *args: Any) -> list[bytes]:
        texts: list[Any] = [str(a) if isinstance(a, int | float) and not isinstance(a, bool)
                            else a for a in args]
        packed: list[bytes] = super().pack(*texts)
        return packed


def _packer() -> dict[str, Any]:
    """The command_packer a single node's connections take, where hiredis packs."""
    # Through Any: redis-py types HiredisRespSerializer's constructor in some releases
    # and not in others (8.2), which mypy --strict would take as an untyped call.
    packer: Any = TextArgsPacker
    return {"command_packer": packer()} if HIREDIS_AVAILABLE else {}


class TextArgsConnection(redis.Connection):
    """A cluster node's connection, packing as a single node's does: RedisCluster
    hands its nodes a connection class, but no command_packer. (A `rediss://` URL
    sets redis-py's own SSLConnection in its place, which packs with hiredis's.)"""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**_packer(), **kwargs})  # type: ignore[no-untyped-call]


def _backoff() -> ExponentialBackoff:
    return ExponentialBackoff(cap=1.0, base=0.05)


def _options(settings: Settings) -> dict[str, Any]:
    """What every client takes alike, blocking or asyncio, single node or cluster."""
    timeout = settings.redis_timeout_seconds
    # Every value taskq writes is UTF-8; one written by hand or another tool may not be,
    # and strict decoding would fail every read of it (and every listing it is in)
    # with an error that is no Redis error. Its bad bytes read as U+FFFD instead.
    return {"decode_responses": True, "encoding_errors": "replace",
            "socket_timeout": timeout, "socket_connect_timeout": timeout}


def connect(settings: Settings | None = None) -> Client:
    """A client for `settings.redis_url` (from the environment when not given): a
    `redis.Redis`, or with TASKQ_REDIS_CLUSTER a `RedisCluster` that discovers the
    other nodes from that one and follows MOVED redirects and failovers.

    Brief blips are retried by the client itself; a retried script call is safe
    because every script is idempotent for the same arguments or fenced by a token.
    The URL was checked when the Settings were made; an unreachable Redis is noticed
    by the first command (only a cluster client connects here).
    """
    settings = settings or Settings.from_env()
    retry = Retry(_backoff(), retries=RETRIES)
    if settings.redis_cluster:
        return RedisCluster.from_url(settings.redis_url, retry=retry, **_options(settings),
                                     connection_class=TextArgsConnection)
    # from_pool: the client owns the pool, and closing it closes every connection. No
    # health check: its PING, sent on every new connection, is refused (MISCONF) while
    # Redis cannot save, and would fail every read then too, not just the writes Redis
    # refuses; the pool finds a connection the server closed without one.
    return redis.Redis.from_pool(redis.BlockingConnectionPool.from_url(
        settings.redis_url,
        max_connections=MAX_CONNECTIONS,
        timeout=settings.redis_timeout_seconds,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        **_options(settings),
        **_packer(),
    ))


def async_client(settings: Settings, max_connections: int = MAX_CONNECTIONS) -> AsyncClient:
    """`connect`'s client for asyncio (`redis.asyncio`), with the same timeouts and
    retries, not yet connected: it connects on its first command, on the event loop
    that awaits it, and belongs to that loop from then on. `max_connections` bounds
    its connections, to each node of a cluster; a cluster's client fails a command
    past it where a single node's waits for a connection to come free."""
    retry = AsyncRetry(_backoff(), retries=RETRIES)
    if settings.redis_cluster:
        return AsyncRedisCluster.from_url(settings.redis_url, retry=retry,
                                          max_connections=max_connections,
                                          **_options(settings))
    # No health check, as `connect` says.
    return redis.asyncio.Redis.from_pool(KeepingPool.from_url(
        settings.redis_url,
        max_connections=max_connections,
        timeout=settings.redis_timeout_seconds,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        **_options(settings),
    ))


async def connect_async(settings: Settings | None = None) -> AsyncClient:
    """`connect` for asyncio: a `redis.asyncio.Redis`, or with TASKQ_REDIS_CLUSTER a
    `redis.asyncio.cluster.RedisCluster` that has found the cluster's nodes, as
    `connect`'s does, before it returns. Close it with `await client.aclose()`."""
    client = async_client(settings or Settings.from_env())
    if isinstance(client, AsyncRedisCluster):
        await client.initialize()
    return client
