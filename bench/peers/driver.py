"""Runs each peer: enqueue one call at a time, then drain with one worker command.

Every run flushes the server, enqueues N no-op tasks through the peer's client (timed:
the enqueue rate), then starts the peer's worker command and times the drain by the
shared counter every no-op INCRs; a count that ends above N (a task ran twice) or
never reaches it (a task was lost) fails that peer loudly.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.drain import DrainPlan, run_drain
from bench.harness import (
    BenchError,
    Child,
    Options,
    Section,
    Server,
    Stat,
    drain_timeout,
    rate,
    run_quietly,
    time_drain,
)
from bench.peers import arq_env
from bench.tasks import COUNTER_KEY

CELERY_FLAGS = ("--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING")


@dataclass(frozen=True)
class Config:
    """One worker command line ({bin}, {queue} and {url} are filled in), its extra
    environment, and the share of --n it drains."""

    label: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    scale: float = 1 / 10


@dataclass(frozen=True)
class Peer:
    name: str
    title: str
    configs: tuple[Config, ...]
    own_venv: bool = False


PEERS = (
    Peer("celery", "Celery", (
        Config("prefork, concurrency 2", ("{bin}/celery", "-A", "bench.peers.celery_app:app",
               "worker", "-P", "prefork", "-c", "2", "-Q", "{queue}", *CELERY_FLAGS)),
    )),
    Peer("rq", "RQ", (
        Config("`rq worker` (forks per job)", ("{bin}/rq", "worker", "-u", "{url}",
               "--logging_level", "WARNING", "{queue}"), scale=1 / 100),
        Config("`rq worker -w SimpleWorker` (no fork)", ("{bin}/rq", "worker", "-u", "{url}",
               "--logging_level", "WARNING", "-w", "rq.worker.SimpleWorker", "{queue}")),
    )),
    Peer("dramatiq", "Dramatiq", (
        Config("2 processes x 8 threads (default)", ("{bin}/dramatiq",
               "bench.peers.dramatiq_app", "-p", "2", "-t", "8", "-Q", "{queue}")),
    )),
    Peer("arq", "arq", (
        Config("max_jobs 100", ("{bin}/arq", "bench.peers.arq_app.WorkerSettings"),
               (("BENCH_ARQ_MAX_JOBS", "100"),)),
    ), own_venv=True),
    Peer("huey", "Huey", (
        Config("2 processes", ("{bin}/huey_consumer", "bench.peers.huey_app.huey", "-q",
               "-k", "process", "-w", "2")),
    )),
    Peer("taskiq", "taskiq", (
        Config("list broker (no acks), 2 worker processes", ("{bin}/taskiq", "worker",
               "bench.peers.taskiq_app:broker", "--workers", "2", "--log-level", "WARNING"),
               (("BENCH_VARIANT", "list"),)),
        Config("stream broker (acks), 2 worker processes", ("{bin}/taskiq", "worker",
               "bench.peers.taskiq_app:broker", "--workers", "2", "--log-level", "WARNING"),
               (("BENCH_VARIANT", "stream"),)),
    )),
)


def _env(server: Server, queue: str, config: Config) -> dict[str, str]:
    return server.env(BENCH_REDIS_URL=server.url, BENCH_QUEUE=queue,
                      BENCH_COUNTER=COUNTER_KEY, **dict(config.env))


def _bin_dir(peer: Peer) -> Path:
    return arq_env.ensure() if peer.own_venv else Path(sys.executable).parent


def _check_importable(server: Server, peer: Peer, bin_dir: Path) -> None:
    env = _env(server, "probe", peer.configs[0])
    probe = subprocess.run([str(bin_dir / "python"), "-c", f"import bench.peers.{peer.name}_app"],
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        raise BenchError(f"cannot import it: {lines[-1] if lines else probe.returncode}")


def _one_run(server: Server, peer: Peer, config: Config, bin_dir: Path,
             n: int) -> tuple[float, float]:
    """(enqueue rate, drain rate) of one run."""
    server.flush()
    queue = f"{peer.name}-{uuid.uuid4().hex[:8]}"
    env = _env(server, queue, config)
    out = run_quietly([str(bin_dir / "python"), "-m", "bench.peers.client", peer.name, str(n)],
                      env, timeout=60 + n / 50)
    enqueued = float(json.loads(out.strip().splitlines()[-1])["rate"])
    argv = [part.format(bin=bin_dir, queue=queue, url=server.url) for part in config.argv]
    worker = Child(argv, env, server.logs / f"{queue}.log")

    def count() -> int:
        return int(server.client.get(COUNTER_KEY) or 0)

    try:
        drained = time_drain(count, n, [worker], drain_timeout(n, 20.0), settle=0.5)
    finally:
        # Counted already: how gracefully a peer stops is not measured.
        worker.stop(2.0)
    return enqueued, drained.rate


def _peer_rows(server: Server, options: Options, peer: Peer, section: Section) -> None:
    try:
        bin_dir = _bin_dir(peer)
        _check_importable(server, peer, bin_dir)
        if peer.own_venv:
            section.versions[peer.name] = arq_env.version(bin_dir)
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        section.rows.append([peer.title, "", "", "", "", "", f"**not run**: {e}"])
        return
    best_drain, best_enqueue = ("", 0.0), ("", 0.0)
    for config in peer.configs:
        n = options.scaled(config.scale, floor=20)
        enqueue, drain = Stat(), Stat()
        try:
            for _ in range(options.repeats):
                sent, drained = _one_run(server, peer, config, bin_dir, n)
                enqueue.add(sent)
                drain.add(drained)
        except BenchError as e:
            section.failures.append(f"{peer.title} ({config.label}): {e}")
            section.rows.append([peer.title, config.label, f"{n:,}", "", "", "",
                                 f"**FAILED**: {e}"])
            continue
        section.rows.append([peer.title, config.label, f"{n:,}", rate(enqueue.median),
                             rate(drain.median), drain.spread(), ""])
        if drain.median > best_drain[1]:
            best_drain = (f"{peer.title} ({config.label})", drain.median)
        if enqueue.median > best_enqueue[1]:
            best_enqueue = (peer.title, enqueue.median)
    for kind, (label, value) in (("drain", best_drain), ("enqueue", best_enqueue)):
        if value > section.figures.get(f"peer-best-{kind}", 0.0):
            section.figures[f"peer-best-{kind}"] = value
            section.labels[f"peer-best-{kind}"] = label


TASKQ_KINDS = (("bench.count_async", "bench.noop_async", "async def"),
               ("bench.count_sync", "bench.noop_sync", "def"))


# The counting handler waits on Redis inside the handler, which changes what
# concurrency suits it: besides the no-op's best, it also runs with fewer handlers.
FEWER_HANDLERS = (16,)


def _taskq_rows(server: Server, options: Options, known: dict[str, float],
                section: Section) -> None:
    """taskq with the peers' handler body, each handler kind at 16 handlers and at the
    concurrency the drain found best for its no-op, in one process and in a pool of two
    (one command either way, as the peers' two-process rows are); its figure is the best
    of them."""
    enqueue = known.get("enqueue-task")
    rows: list[list[str]] = []
    for (name, noop, kind), processes in itertools.product(TASKQ_KINDS, (1, 2)):
        best = int(known.get(f"drain-{noop}-concurrency", 64))
        for concurrency in sorted({*FEWER_HANDLERS, best}):
            drain = _taskq_drain(server, options, section, (name, kind, processes, concurrency))
            if drain is None:
                continue
            pool = f" --processes {processes}" if processes > 1 else ""
            rows.append(["**taskq**", f"`taskq worker{pool} -c {concurrency}`, `{kind}` handler",
                         f"{options.scaled(1 / 10):,}",
                         rate(enqueue) + " (`Task.enqueue`)" if enqueue else "",
                         f"**{rate(drain.median)}**", drain.spread(), ""])
            if drain.median > section.figures.get("peer-taskq-drain", 0.0):
                section.figures["peer-taskq-drain"] = drain.median
    section.rows[0:0] = rows


def _taskq_drain(server: Server, options: Options, section: Section,
                 config: tuple[str, str, int, int]) -> Stat | None:
    """Repeated drains of one configuration, each checked by the shared counter."""
    name, kind, processes, concurrency = config
    n = options.scaled(1 / 10)

    def counted() -> None:
        got = int(server.client.get(COUNTER_KEY) or 0)
        if got != n:
            raise BenchError(f"counter at {got} for {n} tasks")

    drain = Stat()
    try:
        for _ in range(options.repeats):
            drain.add(run_drain(server, DrainPlan(name, n, concurrency, processes),
                                extra_checks=counted).rate)
    except BenchError as e:
        section.fail(f"taskq, {kind} handler, {processes} x {concurrency}", e)
        return None
    return drain


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("peers", "Peers on the same Redis, same no-op (one INCR per task)",
                      ["queue", "worker command setting", "tasks", "enqueue/s (one call "
                       "per task)", "drain tasks/s (median)", "spread", "note"])
    for peer in PEERS:
        print(f"   {peer.title}", file=sys.stderr, flush=True)
        _peer_rows(server, options, peer, section)
    _taskq_rows(server, options, known, section)
    section.notes.append(
        "Each peer's no-op INCRs a shared counter; the drain is timed by that counter from "
        "the 5% mark to N and must then stay at exactly N. Slow configurations drain a "
        "smaller N (--n/10; RQ's forking worker --n/100), reported per second. Peers run with "
        "their defaults apart from the worker command's concurrency setting; results are "
        "not stored (Celery `task_ignore_result`; the others keep their defaults).")
    return section
