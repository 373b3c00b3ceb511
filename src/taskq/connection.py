"""Builds the Redis client every taskq component uses, from `Settings`."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from taskq.settings import Settings
from taskq.transport import Client


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
