"""Scripts on a Redis Cluster, through redis-py's public `Script` objects."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import RedisClusterException, ResponseError

from taskq.transport.protocol import ScriptRun, client_script


class Cluster:
    """The transport of a `RedisCluster`: each call goes to the node that owns its
    keys' slot, following MOVED redirects and failovers, and redis-py's `Script`
    loads a script again on NOSCRIPT. Uses nothing but redis-py's public API, so it
    runs on a single node too (tests hold it against `SingleNode` there)."""

    __slots__ = ("client",)
    spans_slots = False

    def __init__(self, client: RedisCluster | redis.Redis) -> None:
        self.client = client

    def script(self, source: str) -> Script:
        return client_script(self.client, source)

    def run(self, script: Script, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        return script(keys=keys, args=args)

    def run_many(self, runs: Sequence[ScriptRun]) -> list[Any]:
        # One call after the other: the scripts may live on different nodes.
        replies: list[Any] = []
        for script, keys, args in runs:
            try:
                replies.append(script(keys=keys, args=args))
            except ResponseError as e:
                replies.append(e)
        return replies

    def wait_then_run(self, key: str, timeout: float, script: Script,
                      keys: Sequence[Any], args: Sequence[Any]) -> None:
        # A cluster client offers no connection to queue the script behind the pop.
        return None

    def wait(self, keys: Sequence[str], timeout: float) -> bool:
        try:
            self.client.blpop(keys, timeout)
        except (redis.RedisError, RedisClusterException):
            return False
        return True
