"""One queue over several primaries: the same drain on a local 3-primary Redis Cluster
with the queue in one slot (1 shard) and spread over three (3 shards), side by side in
one run, with each primary's Redis CPU per task."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import redis

from bench.harness import (
    BenchError,
    Child,
    Options,
    Section,
    Server,
    Stat,
    drain_timeout,
    python_module,
    rate,
    time_drain,
)
from taskq import App, NewTask
from taskq.connection import connect
from taskq.keys import QueueKeys
from taskq.settings import Settings
from taskq.tools.cluster import EmbeddedCluster

LAYOUTS = (1, 3)
CONCURRENCY = 64
PROCESSES = 2


@dataclass(frozen=True)
class ShardedDrain:
    """One timed drain: its rate, and each primary's Redis CPU (us) per task."""

    rate: float
    cpu_us: tuple[float, ...]

    def busiest_first(self) -> tuple[float, ...]:
        """Each primary's figure, the busiest first: a one-slot queue's slot lands on a
        different primary from run to run, so medians are taken rank by rank, not node
        by node (which would average the busy one away)."""
        return tuple(sorted(self.cpu_us, reverse=True))


def cpu_seconds(node: redis.Redis) -> float:
    info = node.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def run_one(cluster: EmbeddedCluster, primaries: list[redis.Redis], shards: int, n: int,
            env: dict[str, str], logs: Server) -> ShardedDrain:
    queue = f"sh-{uuid.uuid4().hex[:8]}"
    settings = Settings.from_env({}, redis_url=cluster.url, redis_cluster=True, queue=queue)
    app = App(queue=queue, settings=settings, shards=shards)
    app.producer.enqueue_many([NewTask(app.new_task_id(), name="bench.noop_async")
                               for _ in range(n)])
    names = app.layout.shards if app.layout is not None else (queue,)
    client = connect(settings)

    def completed() -> int:
        return sum(int(client.hget(QueueKeys(q).stats, "completed:completed") or 0)
                   for q in names)

    before = [cpu_seconds(p) for p in primaries]
    worker = Child(python_module("taskq", "--log-level", "WARNING", "worker", "--app",
                                 "bench.tasks:app", "--queue", queue, "--concurrency",
                                 str(CONCURRENCY), "--processes", str(PROCESSES)),
                   {**env, "TASKQ_QUEUE": queue, "TASKQ_SHARDS": str(shards)},
                   logs.logs / f"{queue}.log")
    try:
        drained = time_drain(completed, n, [worker], drain_timeout(n))
    finally:
        worker.stop()
    after = [cpu_seconds(p) for p in primaries]
    leased = sum(int(client.hget(QueueKeys(q).stats, "leased:running") or 0) for q in names)
    if leased != n:
        raise BenchError(f"{leased} leases for {n} tasks on {shards} shard(s)")
    client.close()
    return ShardedDrain(drained.rate, tuple((a - b) / n * 1e6
                                            for a, b in zip(after, before, strict=True)))


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("shards", "One queue over three primaries: 1 shard vs 3 "
                      "(local Redis Cluster)",
                      ["layout", "tasks", "tasks/s (median)", "spread",
                       "Redis CPU per task on each primary, busiest first (us, median)"])
    n = options.scaled(1 / 2)
    rates: dict[int, Stat] = {k: Stat() for k in LAYOUTS}
    cpus: dict[int, list[Stat]] = {k: [Stat() for _ in range(3)] for k in LAYOUTS}
    with EmbeddedCluster(primaries=3, replicas=0) as cluster:
        primaries = [cluster.node_client(node) for node in cluster.nodes[:3]]
        env = server.env(REDIS_URL=cluster.url, TASKQ_REDIS_CLUSTER="1")
        try:
            for _ in range(1 if options.quick else options.repeats):
                for shards in LAYOUTS:  # interleaved, so drift hits both alike
                    done = run_one(cluster, primaries, shards, n, env, server)
                    rates[shards].add(done.rate)
                    for stat, us in zip(cpus[shards], done.busiest_first(), strict=True):
                        stat.add(us)
        except BenchError as e:
            section.fail("sharded drain", e)
            return section
        finally:
            for client in primaries:
                client.close()
    for shards in LAYOUTS:
        label = "1 shard (one slot)" if shards == 1 else f"{shards} shards"
        section.rows.append([label, f"{n:,}", rate(rates[shards].median),
                             rates[shards].spread(),
                             " / ".join(f"{s.median:.0f}" for s in cpus[shards])])
    section.figures["shards-3-vs-1"] = rates[3].median / rates[1].median
    section.notes.append(
        f"`bench.noop_async` drained by one `taskq worker --processes {PROCESSES} "
        f"--concurrency {CONCURRENCY}` command (TASKQ_SHARDS=1 or 3) from a local cluster "
        "of 3 primaries without replicas, on this machine's 2 cores with the workers; the "
        "two layouts alternate run by run. Redis CPU per task is each primary's "
        "`used_cpu_sys + used_cpu_user` over the drain, divided by the tasks: with one "
        "shard one primary does all the queue's work; with three each does about a third. "
        "On 2 cores the workers and the three servers share the CPU, so the drain rate "
        "shows the cost of the extra round trips more than the spread's gain, which needs "
        "primaries on their own cores.")
    return section
