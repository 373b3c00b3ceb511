"""Builds the Redis client every taskq component uses, from `Settings`."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from taskq.errors import ConfigError
from taskq.settings import Settings, redacted_url
from taskq.transport import Client


def connect(settings: Settings | None = None) -> Client:
    """A client for `settings.redis_url` (from the environment when not given): a
    `redis.Redis`, or with TASKQ_REDIS_CLUSTER a `RedisCluster` that discovers the
    other nodes from that one and follows MOVED redirects and failovers.

    Brief blips are retried by the client itself; a retried script call is safe
    because every script is idempotent for the same arguments or fenced by a token.
    Raises `ConfigError` for a URL redis-py cannot parse; an unreachable Redis is
    noticed by the first command (only a cluster client connects here).
    """
    settings = settings or Settings.from_env()
    check_url(settings.redis_url)
    timeout = settings.redis_timeout_seconds
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3)
    if settings.redis_cluster:
        return RedisCluster.from_url(
            settings.redis_url,
            decode_responses=True,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=retry,
        )
    return redis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=retry,
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        health_check_interval=30,
    )


def check_url(url: str) -> None:
    """Raise `ConfigError` naming REDIS_URL if redis-py cannot parse `url` (a port or
    db that is not a number): it would raise a bare ValueError wherever a client is made."""
    try:
        redis.ConnectionPool.from_url(url)  # parses the URL; connects only when used
    except ValueError as e:
        raise ConfigError(f"REDIS_URL={redacted_url(url)!r} is not a Redis URL redis-py "
                          f"can use: {e}") from e
