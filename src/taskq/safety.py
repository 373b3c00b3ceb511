"""Refuses Redis servers that could silently lose queue keys, and warns about weak ones."""

from __future__ import annotations

import logging
import re
import time
from typing import Any

import redis
from redis.exceptions import NoPermissionError

from taskq.boundary import redis_errors, text
from taskq.errors import BrokerError, ConfigError, UnsafeRedisError
from taskq.transport import Client, transport_for

log = logging.getLogger("taskq")

# The oldest Redis taskq's scripts run on: they use LMOVE and BLMOVE, RPOP with a
# count and ZADD's LT, all new in 6.2. On an older server a script fails part way.
MIN_REDIS = (6, 2)


def redis_version(text_: str) -> tuple[int, ...] | None:
    """The version in `text_` ("7.0.15", or redis-server --version's "v=7.0.15"), or
    None where it holds none."""
    found = re.search(r"(\d+)\.(\d+)\.(\d+)", text_)
    return None if found is None else tuple(int(part) for part in found.groups())


def too_old(version: tuple[int, ...]) -> str | None:
    """Why a server of `version` cannot run taskq, or None if it can."""
    if version[:2] >= MIN_REDIS:
        return None
    return (f"Redis {'.'.join(map(str, version))} is older than taskq needs: its scripts "
            "use commands new in Redis 6.2 (LMOVE, BLMOVE, RPOP with a count), so run "
            "Redis 6.2 or newer")


def check_version(client: Client) -> None:
    """Raise ConfigError if the server (every node of a cluster) is older than 6.2."""
    with redis_errors("check the server's settings"):
        info: Any = client.info("server")
    versions = [redis_version(str(v)) for k, v in _flat(info) if k == "redis_version"]
    for version in versions:
        problem = None if version is None else too_old(version)
        if problem:
            raise ConfigError(problem)


def _flat(info: Any) -> list[tuple[str, Any]]:
    """INFO's fields, from one node's dict or a cluster's dict of them."""
    if not isinstance(info, dict):
        return []
    pairs: list[tuple[str, Any]] = []
    for key, value in info.items():
        pairs += _flat(value) if isinstance(value, dict) else [(str(key), value)]
    return pairs


CLUSTER_NODE = ("this Redis is a node of a Redis Cluster (cluster_enabled:1): set "
                "TASKQ_REDIS_CLUSTER=1, so that taskq follows the cluster's slots")


def check_not_a_cluster_node(client: Client) -> None:
    """Raise ConfigError if a plain client talks to a cluster node: every call on a
    queue whose slot another node serves is answered MOVED, which would read as an
    outage waited out for ever."""
    if not transport_for(client).spans_slots:
        return  # a cluster client, which follows the slots
    with redis_errors("check the server's settings"):
        info: Any = client.info("cluster")
    if isinstance(info, dict) and str(info.get("cluster_enabled", "0")) == "1":
        raise ConfigError(CLUSTER_NODE)


REPLICA = ("this Redis is a read-only replica (role:slave): every lease and enqueue "
           "would be refused; point REDIS_URL at the primary")


def check_primary(client: Client) -> None:
    """Raise ConfigError if a plain client talks to a replica: a worker would wait out
    its READONLY refusals for good, as an outage, and no one would hear of it. (A
    cluster client sends its writes to the primaries.)"""
    if not transport_for(client).spans_slots:
        return
    with redis_errors("check the server's settings"):
        info: Any = client.info("replication")
    if isinstance(info, dict) and str(info.get("role", "master")) == "slave":
        raise ConfigError(REPLICA)


# How often a worker starting while Redis runs a long script asks again (s).
BUSY_RETRY_SECONDS = 1.0


def busy(error: BaseException) -> bool:
    """Whether `error` (a BrokerError) is Redis running a script past its busy limit
    (BUSY): it answers again when the script ends, or is killed."""
    return isinstance(error.__cause__, redis.ResponseError) and \
        str(error.__cause__).startswith("BUSY")


def check_server_when_free(client: Client) -> None:
    """`check_server`, asked again while Redis is busy running a long script (BUSY),
    as a worker waits out one that comes while it runs: that is no setting of the
    server's, and ends by itself."""
    told = False
    while True:
        try:
            check_server(client)
            return
        except BrokerError as e:
            if not busy(e):
                raise
            if not told:
                log.warning("Redis is busy running a script (%s): waiting for it to end "
                            "before starting", e.__cause__)
                told = True
            time.sleep(BUSY_RETRY_SECONDS)


def check_server(client: Client) -> None:
    """Raise `UnsafeRedisError` if eviction could drop queue keys; warn if AOF is off;
    raise `BrokerError` if Redis cannot be reached; raise ConfigError if a plain client
    reaches a cluster node (see `check_not_a_cluster_node`) or a replica.

    Any policy but `noeviction` can drop keys under memory pressure: `allkeys-*` takes
    task records and queues, `volatile-*` takes idempotency keys, and then a resent
    task is created twice. Servers that hide CONFIG (managed Redis) get a warning.
    A server older than Redis 6.2 raises ConfigError (see MIN_REDIS).
    """
    try:
        check_version(client)
        check_not_a_cluster_node(client)
        check_primary(client)
    except BrokerError as e:
        # INFO is in ACL category @dangerous, which a user of `+@all -@dangerous` (a
        # common one for applications) may not run; every script runs without it.
        if not isinstance(e.__cause__, NoPermissionError):
            raise
        log.warning("cannot read the server's INFO (%s): make sure it is Redis %s or "
                    "newer, and set TASKQ_REDIS_CLUSTER=1 if it is a Redis Cluster node",
                    e.__cause__, ".".join(map(str, MIN_REDIS)))
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
