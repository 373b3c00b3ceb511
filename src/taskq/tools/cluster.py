"""A local Redis Cluster from the same redis-server binary, for tests and trials.

Slots are assigned and nodes introduced with CLUSTER commands over redis-py, so it
needs no redis-cli and works on Redis 6.2 and 7.x alike.
"""

from __future__ import annotations

import shutil
import socket
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from taskq.errors import EmbeddedRedisError
from taskq.tools.embedded import EmbeddedRedis, free_port

SLOTS = 16384
# A node's cluster bus listens on its port + 10000, so the port itself must stay below this.
BUS_OFFSET = 10000
HIGHEST_NODE_PORT = 65535 - BUS_OFFSET


@dataclass
class EmbeddedCluster:
    """`primaries` primaries, each with `replicas` replicas, on loopback ports."""

    primaries: int = 3
    replicas: int = 1
    binary: str = ""
    data_dir: Path | None = None
    node_timeout_ms: int = 1000
    nodes: list[EmbeddedRedis] = field(default_factory=list)
    _own_dir: bool = False

    @property
    def url(self) -> str:
        """Any node's URL: a cluster client discovers the rest from it."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self, timeout: float = 30.0) -> EmbeddedCluster:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="taskq-cluster-"))
            self._own_dir = True
        try:
            self._start_nodes(timeout)
        except BaseException:
            self.stop()  # no node outlives a cluster that failed to form
            raise
        return self

    def _start_nodes(self, timeout: float) -> None:
        for index in range(self.primaries * (1 + self.replicas)):
            self.nodes.append(self._start_node(index))
        clients = [self.node_client(node) for node in self.nodes]
        try:
            self._assign_slots(clients[: self.primaries])
            for client in clients[1:]:
                _command(client, "CLUSTER", "MEET", "127.0.0.1", self.nodes[0].port)
            self._wait(lambda: all(len(_known(c)) == len(clients) for c in clients), timeout,
                       "every node to know every other")
            primary_ids = [_command(c, "CLUSTER", "MYID") for c in clients[: self.primaries]]
            for index, client in enumerate(clients[self.primaries :]):
                _command(client, "CLUSTER", "REPLICATE", primary_ids[index % self.primaries])
            self._wait(lambda: all(_state_ok(c) for c in clients), timeout, "cluster_state:ok")
            # A replica that has not synced yet could not take over: wait for every link.
            self._wait(lambda: all(_synced(c) for c in clients[self.primaries :]), timeout,
                       "every replica to sync")
        finally:
            for client in clients:
                client.close()

    def _start_node(self, index: int) -> EmbeddedRedis:
        assert self.data_dir is not None
        failure: EmbeddedRedisError | None = None
        for _ in range(5):
            node = EmbeddedRedis(
                binary=self.binary, data_dir=self.data_dir / f"node-{index}", port=node_port(),
                extra_config={"cluster-enabled": "yes",
                              "cluster-config-file": "nodes.conf",
                              "cluster-node-timeout": str(self.node_timeout_ms),
                              # A replica may always take over: a loopback test cluster
                              # has no stale replicas to fear.
                              "cluster-replica-validity-factor": "0",
                              "repl-diskless-sync-delay": "0"},
            )  # fmt: skip
            try:
                return node.start()
            except EmbeddedRedisError as error:
                failure = error  # most likely a port taken between choosing and binding it
        raise EmbeddedRedisError(
            f"could not start cluster node {index} in five tries; the last: {failure}"
        ) from failure

    def _assign_slots(self, primaries: list[redis.Redis]) -> None:
        per = SLOTS // len(primaries)
        for index, client in enumerate(primaries):
            end = SLOTS if index == len(primaries) - 1 else (index + 1) * per
            _command(client, "CLUSTER", "ADDSLOTS", *range(index * per, end))

    @staticmethod
    def node_client(node: EmbeddedRedis) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=node.port, decode_responses=True,
                           socket_timeout=5)

    @staticmethod
    def _wait(predicate: object, timeout: float, what: str) -> None:
        assert callable(predicate)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except redis.RedisError:
                pass
            time.sleep(0.1)
        raise EmbeddedRedisError(f"the cluster did not reach {what} within {timeout}s")

    def primary_of(self, key: str) -> EmbeddedRedis:
        """The node that serves `key`'s slot now (after a failover, a former replica)."""
        live = [node for node in self.nodes if node.process is not None]
        for node in live:
            client = self.node_client(node)
            try:
                if _owns(client, int(_command(client, "CLUSTER", "KEYSLOT", key))):
                    return node
            except redis.RedisError:
                continue
            finally:
                client.close()
        raise EmbeddedRedisError(f"no live primary serves {key!r}")

    def wait_healthy(self, timeout: float = 30.0) -> None:
        live = [self.node_client(n) for n in self.nodes if n.process is not None]
        try:
            self._wait(lambda: all(_state_ok(c) for c in live), timeout, "cluster_state:ok")
        finally:
            for client in live:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def node_port() -> int:
    """A free loopback port whose cluster bus port (+10000) exists and is free too: the
    kernel's ephemeral range reaches past HIGHEST_NODE_PORT, where a node refuses to start."""
    while True:
        port = free_port()
        if port > HIGHEST_NODE_PORT:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                continue
        return port


def _command(client: redis.Redis, *args: object) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def _known(client: redis.Redis) -> list[str]:
    return [line for line in str(_command(client, "CLUSTER", "NODES")).splitlines() if line]


def _synced(client: redis.Redis) -> bool:
    return client.info("replication").get("master_link_status") == "up"


def _state_ok(client: redis.Redis) -> bool:
    info = str(_command(client, "CLUSTER", "INFO"))
    return "cluster_state:ok" in info


def _owns(client: redis.Redis, slot: int) -> bool:
    """Whether this node is, by its own view, the primary of `slot`."""
    myid = _command(client, "CLUSTER", "MYID")
    for start, end, owner, *_ in _command(client, "CLUSTER", "SLOTS"):
        if int(start) <= slot <= int(end):
            return bool(owner[2] == myid)
    return False
