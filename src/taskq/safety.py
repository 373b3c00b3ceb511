"""Refuses Redis servers that could silently lose queue keys, and warns about weak ones."""

from __future__ import annotations

import logging

import redis

from taskq.boundary import redis_errors, text
from taskq.errors import UnsafeRedisError
from taskq.transport import Client

log = logging.getLogger("taskq")


def check_server(client: Client) -> None:
    """Raise `UnsafeRedisError` if eviction could drop queue keys; warn if AOF is off;
    raise `BrokerError` if Redis cannot be reached.

    Any policy but `noeviction` can drop keys under memory pressure: `allkeys-*` takes
    task records and queues, `volatile-*` takes idempotency keys, and then a resent
    task is created twice. Servers that hide CONFIG (managed Redis) get a warning.
    """
    with redis_errors("check the server's settings"):
        try:
            policy = _config(client, "maxmemory-policy")
            appendonly = _config(client, "appendonly")
        except redis.ResponseError as e:
            log.warning("cannot read the server's CONFIG (%s): make sure maxmemory-policy "
                        "is noeviction and AOF is on", e)
            return
    if policy not in ("", "noeviction"):
        raise UnsafeRedisError(
            f"Redis maxmemory-policy is {policy!r}, which can evict queue keys and lose "
            "tasks; set it to 'noeviction' (CONFIG SET maxmemory-policy noeviction)"
        )
    if appendonly != "yes":
        log.warning("Redis AOF is off (appendonly no): a Redis crash loses every write since "
                    "the last snapshot; turn it on with appendonly yes")


def _config(client: Client, name: str) -> str:
    values = client.config_get(name)
    value = values.get(name, "") if isinstance(values, dict) else ""
    return text(value)
