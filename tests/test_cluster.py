"""taskq on a real local Redis Cluster: three primaries with a replica each."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from serve_support import Server, enqueue, feed, server_env
from taskq.broker import Broker, NewTask
from taskq.connection import connect
from taskq.errors import BrokerError, EmbeddedRedisError
from taskq.keys import QueueKeys
from taskq.processes import spawn, stop_all, taskq_command
from taskq.settings import Settings
from taskq.snapshot import take_snapshot
from taskq.tools.cluster import HIGHEST_NODE_PORT, EmbeddedCluster, node_port
from taskq.tools.embedded import EmbeddedRedis, find_redis_server
from taskq.tools.ledger import Ledger
from taskq.tools.tracecheck import read_log, validate
from taskq.web.metrics import read_queues
from waiting import wait_until, worker_env

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(binary=os.environ.get("REDIS_SERVER", ""),
                         data_dir=tmp_path_factory.mktemp("cluster")) as started:
        yield started


@pytest.fixture
def cluster_client(cluster: EmbeddedCluster) -> Iterator[redis.Redis]:
    cluster.wait_healthy()
    client = connect(Settings.from_env({}, redis_url=cluster.url, redis_cluster=True))
    client.flushall()
    yield client
    client.close()


def slot(client: redis.Redis, key: str) -> int:
    return int(client.cluster_keyslot(key))  # type: ignore[attr-defined]


def run_workers(cluster: EmbeddedCluster, tmp_path: Path, queues: list[str],
                **env: str) -> list[subprocess.Popen[bytes]]:
    base = worker_env(cluster.url, "default", tmp_path / "ledger.db", **{
        "TASKQ_REDIS_CLUSTER": "1", "WORK_SECONDS": "0.005", "LEASE_SECONDS": "2",
        "TASKQ_CONCURRENCY": "4", "BACKOFF_MAX_SECONDS": "0.5", **env})
    return [spawn(taskq_command("worker", "--queue", queue), base,
                  str(tmp_path / f"worker-{n}.log")) for n, queue in enumerate(queues)]


def promoted(cluster: EmbeddedCluster, key: str, victim: EmbeddedRedis) -> bool:
    try:
        return cluster.primary_of(key) is not victim
    except EmbeddedRedisError:
        return False  # no primary for the slot until the failover completes


def all_done(broker: Broker) -> bool:
    try:
        counts = broker.counts()
    except BrokerError:
        return False  # the slot's primary is down until a replica takes over
    return counts.ready == counts.leased == counts.delayed == 0


def test_a_queue_lives_in_one_slot_and_queues_spread_over_the_primaries(
    cluster: EmbeddedCluster, cluster_client: redis.Redis
) -> None:
    slots = set()
    for n in range(12):
        broker = Broker(cluster_client, f"q{n}")
        broker.enqueue("t1", delay=1, idempotency_key="k")
        broker.enqueue("t2")
        k = broker.keys
        keys = [k.ready, k.delayed, k.events, k.seq, k.epoch, k.task("t1"), k.idem("k")]
        assert len({slot(cluster_client, key) for key in keys}) == 1
        slots.add(slot(cluster_client, k.ready))
        assert take_snapshot(broker).counts.ready == 1
    owners = {cluster.primary_of(QueueKeys(f"q{n}").ready).port for n in range(12)}
    assert len(owners) == 3, "twelve queues should land on all three primaries"
    assert len(slots) == 12


def test_workers_drain_several_queues_on_different_primaries(
    cluster: EmbeddedCluster, cluster_client: redis.Redis, tmp_path: Path
) -> None:
    queues = ["alpha", "beta", "gamma", "delta"]
    brokers = [Broker(cluster_client, q) for q in queues]
    for broker in brokers:
        broker.enqueue_many([NewTask(f"{broker.queue}-{i}", payload={"charge": 1})
                             for i in range(100)])
    workers = run_workers(cluster, tmp_path, queues)
    try:
        for broker in brokers:
            wait_until(lambda b=broker: all_done(b), timeout=60, what=f"{broker.queue} drained")
    finally:
        stop_all(workers)
    summary = Ledger(tmp_path / "ledger.db").summary()
    assert (summary.charges, summary.tasks, summary.charged_twice) == (400, 400, [])
    for broker in brokers:
        assert validate(read_log(cluster_client, broker.keys.events)).ok


def test_taskq_serve_streams_the_queues_of_every_primary_live(
    cluster: EmbeddedCluster, cluster_client: redis.Redis, tmp_path: Path
) -> None:
    owners: dict[int, str] = {}
    for n in range(24):
        owners.setdefault(cluster.primary_of(QueueKeys(f"feed{n}").events).port, f"feed{n}")
    brokers = [Broker(cluster_client, queue) for queue in owners.values()]
    assert len(brokers) == 3, "a queue on each primary"
    for broker in brokers:
        enqueue(broker, 1, "before")
    env = server_env(cluster.nodes[0], tmp_path, TASKQ_REDIS_CLUSTER="1")
    serve = Server(env, tmp_path / "serve.log").start()
    try:
        with ExitStack() as open_streams:
            streams = [open_streams.enter_context(feed(serve, broker)) for broker in brokers]
            caught_up = [[b.body["task"] for b in s.rows_until_quiet() if b.is_row]
                         for s in streams]
            for broker in brokers:
                enqueue(broker, 1, "live")
            live = [[b.body["task"] for b in s.until(lambda b: b.is_row) if b.is_row]
                    for s in streams]
    finally:
        serve.stop()
    assert caught_up == [["before-0"]] * 3
    assert live == [["live-0"]] * 3


def test_metrics_reads_the_queues_of_every_primary(
    cluster: EmbeddedCluster, cluster_client: redis.Redis
) -> None:
    """One batch: its scripts run one by one (a cluster pipeline carries none), its
    totals by a pipeline over the nodes."""
    owners: dict[int, str] = {}
    for n in range(24):
        owners.setdefault(cluster.primary_of(QueueKeys(f"m{n}").events).port, f"m{n}")
    names = sorted(owners.values())
    for n, name in enumerate(names):
        for i in range(n + 1):
            Broker(cluster_client, name).enqueue(f"t{i}")
    counts, stats = read_queues(Broker(cluster_client, names[0]), names)
    assert [c.ready for c in counts] == [1, 2, 3]
    assert [s["enqueued"] for s in stats if isinstance(s, dict)] == [1, 2, 3]


def test_killing_a_primary_loses_nothing_and_charges_nothing_twice(
    cluster: EmbeddedCluster, cluster_client: redis.Redis, tmp_path: Path
) -> None:
    broker = Broker(cluster_client, "failover")
    broker.enqueue_many([NewTask(f"f{i}", payload={"charge": 1}) for i in range(600)])
    victim = cluster.primary_of(broker.keys.ready)
    workers = run_workers(cluster, tmp_path, ["failover", "failover"], WORK_SECONDS="0.02")
    try:
        wait_until(lambda: broker.counts().ready < 450, timeout=30, what="work under way")
        victim.kill()
        wait_until(lambda: promoted(cluster, broker.keys.ready, victim), timeout=30,
                   what="a replica to take over")
        wait_until(lambda: all_done(broker), timeout=90, what="every task to finish")
    finally:
        stop_all(workers)
    states = [broker.task(f"f{i}") for i in range(600)]
    assert all(r is not None and r.state == "completed" for r in states)
    summary = Ledger(tmp_path / "ledger.db").summary()
    assert summary.charged_twice == []
    assert summary.tasks == 600


def test_a_plain_client_on_a_cluster_node_is_told_to_turn_cluster_mode_on(
    cluster: EmbeddedCluster, cluster_client: redis.Redis, tmp_path: Path
) -> None:
    """Answered MOVED for every queue another node serves, a worker would wait it out as
    an outage for ever; a producer would be told only MovedError."""
    queue = "elsewhere"
    owner = cluster.primary_of(QueueKeys(queue).ready)
    other = next(n for n in cluster.nodes[:3] if n is not owner)
    url = f"redis://127.0.0.1:{other.port}/0"
    with pytest.raises(BrokerError, match="a node of a Redis Cluster; set TASKQ_REDIS_CLUSTER=1"):
        Broker(cluster.node_client(other), queue).enqueue("t1")
    env = worker_env(url, queue, tmp_path / "ledger.db", TASKQ_REDIS_CLUSTER="0")
    worker = subprocess.run(taskq_command("worker"), env=env, capture_output=True, text=True,
                            timeout=60, check=False)
    assert worker.returncode == 2
    assert "a node of a Redis Cluster (cluster_enabled:1): set TASKQ_REDIS_CLUSTER=1" in \
        worker.stderr


def test_node_ports_leave_room_for_the_cluster_bus_above_them() -> None:
    # The kernel's ephemeral range reaches 60999; a node on a port above 55535 has no bus
    # port and exits at once.
    for _ in range(300):
        port = node_port()
        assert port <= HIGHEST_NODE_PORT


def test_a_cluster_that_cannot_form_names_why_and_leaves_no_node_running(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    wrapper = tmp_path / "redis-server"
    wrapper.write_text(
        "#!/bin/sh\n"
        'case "$1" in */node-1/*) echo >&2 refused; exit 3;;\n'
        '  --version) echo Redis server v=7.0.0; exit;; esac\n'
        f'echo $$ >> {pids}\nexec {find_redis_server(os.environ.get("REDIS_SERVER", ""))} "$@"\n'
    )
    wrapper.chmod(0o755)
    cluster = EmbeddedCluster(binary=str(wrapper), data_dir=tmp_path / "cluster")
    with pytest.raises(EmbeddedRedisError, match=r"cluster node 1 in five tries.*status 3"):
        cluster.start()
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 1
    with pytest.raises(ProcessLookupError):
        os.kill(started[0], 0)
