"""Builds the Redis client every taskq component uses, from `Settings`."""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from taskq.settings import Settings


def connect(settings: Settings | None = None) -> redis.Redis:
    """A `redis.Redis` for `settings.redis_url` (from the environment when not given).

    Brief blips are retried by the client itself; a retried script call is safe
    because every script is idempotent for the same arguments or fenced by a token.
    """
    settings = settings or Settings.from_env()
    timeout = settings.redis_timeout_seconds
    return redis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=3),
        retry_on_error=[redis.ConnectionError, redis.TimeoutError],
        health_check_interval=30,
    )
