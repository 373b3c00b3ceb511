"""The peers' side of the memory bench: what each keeps, how it is filled in bulk in its
own interpreter, and the bytes its queued tasks and finished jobs leave in Redis."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.harness import (
    Child,
    Server,
    drain_timeout,
    per_task,
    run_all,
    run_quietly,
    used_memory,
)
from bench.peers.driver import PEERS, Config, new_count

DELAY_SECONDS = 3600.0
# Producer processes per fill: most peers send one task per call, and two producers
# bring a million of them within minutes on two cores.
PRODUCERS = 2


@dataclass(frozen=True)
class System:
    """One peer: the facts its queued task keeps, how the bench fills it in bulk, where
    its delayed tasks live (and, when that is not in Redis, what its table cell says),
    and the worker command and facts of a finished job's record (None when it keeps none
    by default)."""

    name: str
    title: str
    facts: frozenset[str]
    bulk: str
    delayed: str
    completed: tuple[Config, str] | None = None
    own_venv: bool = False
    delayed_elsewhere: str = ""


def _config(peer: str, index: int, *env: tuple[str, str]) -> Config:
    config = next(p for p in PEERS if p.name == peer).configs[index]
    return Config(config.label, config.argv, config.env + env, config.scale)


SYSTEMS = (
    System("rq", "RQ", frozenset({"state", "retries", "times"}),
           "`Queue.enqueue_many` (one pipeline per 1,000), `Retry(3)` so it keeps a retry count",
           "job hash, id in the scheduled registry ZSET",
           (_config("rq", 1), "job hash (state, times, retries) and finished registry entry "
                              "for result_ttl (500 s), result stream")),
    System("celery", "Celery", frozenset({"retries"}),
           "`apply_async` through one producer (one LPUSH per message; no bulk send)",
           "an ETA message waits in the list like a ready one until a worker fetches it, "
           "then in that worker's memory (and kombu's unacked hash) until due",
           (_config("celery", 0, ("BENCH_KEEP_RESULTS", "1")),
            "Redis result backend: result key (state, result, date_done) for 1 day"),
           delayed_elsewhere="in a worker"),
    System("dramatiq", "Dramatiq", frozenset({"times"}),
           "`send`, one call per message (no bulk send)",
           "message hash and delay-queue list (`.DQ`)"),
    System("arq", "arq", frozenset({"retries", "times"}),
           "`enqueue_job`, 100 awaited together (no bulk enqueue)",
           "job key, queue ZSET scored later",
           (_config("arq", 0), "result key (result, times, try) for keep_result (1 h)"),
           own_venv=True),
    System("huey", "Huey", frozenset({"retries"}),
           "one call per task (no bulk enqueue)",
           "the queue list, until a consumer moves it to the schedule ZSET"),
    System("taskiq", "taskiq (list broker)", frozenset(),
           "`kiq`, 100 awaited together (no bulk send)",
           "none: its Redis brokers have no delay (a schedule source is a separate part)",
           delayed_elsewhere="no delay"),
)


def _env(server: Server, queue: str, extra: dict[str, str]) -> dict[str, str]:
    return server.env(BENCH_REDIS_URL=server.url, BENCH_QUEUE=queue, **extra)


def _fill(server: Server, bin_dir: Path, system: System, n: int, delay: float,
          env: dict[str, str]) -> None:
    """N tasks from PRODUCERS processes at once, each with its share."""
    shares = [n // PRODUCERS + (i < n % PRODUCERS) for i in range(PRODUCERS)]
    with ThreadPoolExecutor(PRODUCERS) as pool:
        runs = [pool.submit(run_quietly, [str(bin_dir / "python"), "-m", "bench.peers.fill",
                                          system.name, str(share), repr(delay)],
                            env, 120 + share / 500)
                for share in shares if share]
        for run in runs:
            run.result()


def peer_queued(server: Server, system: System, bin_dir: Path, n: int, delay: float) -> float:
    """Bytes per task of N of the peer's tasks, put in Redis by its bulk path."""
    server.flush()
    queue = f"{system.name}-{uuid.uuid4().hex[:8]}"
    before = used_memory(server)
    _fill(server, bin_dir, system, n, delay, _env(server, queue, {}))
    return per_task(before, used_memory(server), n)


def peer_completed(server: Server, system: System, bin_dir: Path, n: int) -> float:
    """Bytes per task left once the peer's worker has run N of its tasks, its workers
    stopped (what remains is what it keeps of finished jobs)."""
    assert system.completed is not None
    config = system.completed[0]
    server.flush()
    queue = f"{system.name}-{uuid.uuid4().hex[:8]}"
    count = new_count(server, "tally", queue)
    env = _env(server, queue, {**count.env(), **dict(config.env)})
    before = used_memory(server)
    _fill(server, bin_dir, system, n, 0.0, env)
    argv = [part.format(bin=bin_dir, queue=queue, url=server.url) for part in config.argv]
    worker = Child(argv, env, server.logs / f"{queue}.log")
    try:
        run_all(count.reader(server), n, worker, drain_timeout(n, 20.0))
    finally:
        worker.stop(5.0)
    return per_task(before, used_memory(server), n)


