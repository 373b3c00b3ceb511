"""Runs each peer: enqueue one call at a time, then drain with one worker command.

Every run flushes the server, enqueues N no-op tasks through the peer's client (timed:
the enqueue rate), then starts the peer's worker command and times the drain by the
count every no-op adds to: a byte appended to the run's tally file (issue 7's no-op),
or an INCR of a shared Redis counter (the body the bench first used; issue 21's no-op
for `def` handlers); both targets are judged in the drain duels (bench/drain_duel.py),
whose rounds interleave the commands. A count that
ends above N (a task ran twice) or never reaches it (a task was lost) fails that peer
loudly. taskq runs the same two bodies.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import tally
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

# The no-op's body: how each run of a task is counted (bench/peers/counter.py).
BODIES = {"tally": "tally-file append", "incr": "one Redis INCR"}

# The share of --n a configuration that drains thousands of tasks a second runs.
FAST = 1 / 2

CELERY_FLAGS = ("--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING")


@dataclass(frozen=True)
class Config:
    """One worker command line ({bin}, {queue} and {url} are filled in), its extra
    environment, and the share of --n it drains: the fast ones drain more, so a run
    lasts seconds and start-up and polling stay small beside it."""

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
               "bench.peers.dramatiq_app", "-p", "2", "-t", "8", "-Q", "{queue}"),
               scale=FAST),
        Config("3 processes x 8 threads", ("{bin}/dramatiq",
               "bench.peers.dramatiq_app", "-p", "3", "-t", "8", "-Q", "{queue}"),
               scale=FAST),
    )),
    Peer("arq", "arq", (
        Config("max_jobs 100", ("{bin}/arq", "bench.peers.arq_app.WorkerSettings"),
               (("BENCH_ARQ_MAX_JOBS", "100"),)),
    ), own_venv=True),
    Peer("huey", "Huey", (
        Config("2 processes", ("{bin}/huey_consumer", "bench.peers.huey_app.huey", "-q",
               "-k", "process", "-w", "2"), scale=FAST),
        Config("3 processes", ("{bin}/huey_consumer", "bench.peers.huey_app.huey", "-q",
               "-k", "process", "-w", "3"), scale=FAST),
    )),
    Peer("taskiq", "taskiq", tuple(
        Config(f"{variant} broker ({acks}), {workers} worker processes",
               ("{bin}/taskiq", "worker", "bench.peers.taskiq_app:broker", "--workers",
                str(workers), "--log-level", "WARNING"),
               (("BENCH_VARIANT", variant),), scale=FAST)
        for workers in (2, 3) for variant, acks in (("list", "no acks"), ("stream", "acks"))
    )),
)


@dataclass(frozen=True)
class Count:
    """How one run counts its no-ops: the body, and the tally file it appends to."""

    body: str
    tally_path: Path

    def env(self) -> dict[str, str]:
        return {"BENCH_BODY": self.body, tally.TALLY_ENV: str(self.tally_path)}

    def reader(self, server: Server) -> Callable[[], int]:
        if self.body == "tally":
            return lambda: tally.count(self.tally_path)
        return lambda: int(server.client.get(COUNTER_KEY) or 0)

    def check(self, server: Server, n: int) -> None:
        """After a drain: exactly `n` runs counted."""
        got = self.reader(server)()
        if got != n:
            raise BenchError(f"{BODIES[self.body]} counted {got} runs for {n} tasks")


def new_count(server: Server, body: str, run: str) -> Count:
    return Count(body, server.logs / f"{run}.tally")


def _env(server: Server, queue: str, config: Config, count: Count) -> dict[str, str]:
    return server.env(BENCH_REDIS_URL=server.url, BENCH_QUEUE=queue,
                      BENCH_COUNTER=COUNTER_KEY, **count.env(), **dict(config.env))


def bin_dir(own_venv: bool) -> Path:
    """The directory of the interpreter and commands a peer runs from: its own venv
    (arq's, whose redis-py pin clashes with the others') or this one."""
    return arq_env.ensure() if own_venv else Path(sys.executable).parent


def check_importable(server: Server, peer: Peer, bin_dir: Path) -> None:
    env = _env(server, "probe", peer.configs[0], new_count(server, "tally", "probe"))
    probe = subprocess.run([str(bin_dir / "python"), "-c", f"import bench.peers.{peer.name}_app"],
                           env=env, capture_output=True, text=True, timeout=120, check=False)
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        raise BenchError(f"cannot import it: {lines[-1] if lines else probe.returncode}")


# What a peer that cannot run raises while it is set up and probed.
SETUP_ERRORS = (BenchError, OSError, subprocess.TimeoutExpired)


def ready_dir(server: Server, peer: Peer, section: Section) -> Path:
    """The directory `peer` runs from, checked to import it, its own venv's version noted
    in `section`; raises one of SETUP_ERRORS when it cannot run."""
    directory = bin_dir(peer.own_venv)
    check_importable(server, peer, directory)
    if peer.own_venv:
        section.versions[peer.name] = arq_env.version(directory)
    return directory


def run_client(bin_dir: Path, name: str, n: int, env: dict[str, str]) -> dict[str, Any]:
    """`bench.peers.client` for `bench.peers.<name>_app`: N calls, one task each; its
    window's figures (the calls after the first), checked to hold them all."""
    out = run_quietly([str(bin_dir / "python"), "-m", "bench.peers.client", name, str(n)],
                      env, timeout=60 + n / 50)
    window: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if window.get("calls") != n - 1:
        raise BenchError(f"the client timed {window.get('calls')} calls of {n - 1}")
    return window


def worker_command(config: Config, bin_dir: Path, queue: str, server: Server) -> list[str]:
    return [part.format(bin=bin_dir, queue=queue, url=server.url) for part in config.argv]


@dataclass(frozen=True)
class Filled:
    """A flushed server holding N of a peer's tasks, sent by its client one call each:
    the queue, the environment its worker needs, its count and the client's figures."""

    queue: str
    env: dict[str, str]
    count: Count
    sent: dict[str, Any]


def fill_with_client(server: Server, peer: Peer, config: Config, bin_dir: Path, n: int,
                     body: str) -> Filled:
    server.flush()
    queue = f"{peer.name}-{uuid.uuid4().hex[:8]}"
    count = new_count(server, body, queue)
    env = _env(server, queue, config, count)
    return Filled(queue, env, count, run_client(bin_dir, peer.name, n, env))


def _one_run(server: Server, peer: Peer, config: Config, bin_dir: Path,
             n: int, body: str) -> tuple[float, float]:
    """(enqueue rate, drain rate) of one run."""
    filled = fill_with_client(server, peer, config, bin_dir, n, body)
    worker = Child(worker_command(config, bin_dir, filled.queue, server), filled.env,
                   server.logs / f"{filled.queue}.log")
    try:
        drained = time_drain(filled.count.reader(server), n, [worker],
                             drain_timeout(n, 20.0), settle=0.5)
    finally:
        # Counted already: how gracefully a peer stops is not measured.
        worker.stop(2.0)
    return float(filled.sent["rate"]), drained.rate


def _figure(body: str, name: str) -> str:
    """The figure's key: the tally body's figures, the first the bench had, carry no suffix."""
    return name if body == "tally" else f"{name}-{body}"


def _peer_rows(server: Server, options: Options, peer: Peer, body: str,
               section: Section) -> None:
    try:
        directory = ready_dir(server, peer, section)
    except SETUP_ERRORS as e:
        section.rows.append([peer.title, "", BODIES[body], "", "", "", "", f"**not run**: {e}"])
        return
    best_drain, best_enqueue = ("", 0.0), ("", 0.0)
    for config in peer.configs:
        n = options.scaled(config.scale, floor=20)
        enqueue, drain = Stat(), Stat()
        try:
            for _ in range(options.repeats):
                sent, drained = _one_run(server, peer, config, directory, n, body)
                enqueue.add(sent)
                drain.add(drained)
        except BenchError as e:
            section.failures.append(f"{peer.title} ({config.label}, {BODIES[body]}): {e}")
            section.rows.append([peer.title, config.label, BODIES[body], f"{n:,}", "", "", "",
                                 f"**FAILED**: {e}"])
            continue
        section.rows.append([peer.title, config.label, BODIES[body], f"{n:,}",
                             rate(enqueue.median), rate(drain.median), drain.spread(), ""])
        if drain.median > best_drain[1]:
            best_drain = (f"{peer.title} ({config.label})", drain.median)
        if enqueue.median > best_enqueue[1]:
            best_enqueue = (peer.title, enqueue.median)
    for kind, (label, value) in ((_figure(body, "peer-best-drain"), best_drain),
                                 ("peer-best-enqueue", best_enqueue)):
        if value > section.figures.get(kind, 0.0):
            section.figures[kind] = value
            section.labels[kind] = label


# (handler, no-op it stands for, handler kind) per body.
TASKQ_KINDS = {
    "tally": (("bench.tally_async", "bench.noop_async", "async def"),
              ("bench.tally_sync", "bench.noop_sync", "def")),
    "incr": (("bench.count_async", "bench.noop_async", "async def"),
             ("bench.count_sync", "bench.noop_sync", "def")),
}


# A handler that waits on Redis changes what concurrency suits it: besides the no-op's
# best, each body also runs with fewer handlers.
FEWER_HANDLERS = (16,)
# And with a few handler threads kept busy by tasks leased ahead of them (--prefetch):
# (processes, concurrency, prefetch). A pool of one process more than the machine's two
# cores runs too, as each of the fastest peers' does (their 3-process rows).
PREFETCHED = ((2, 16, 112), (3, 16, 112))


# The suffix of a handler kind's own best figure, e.g. peer-taskq-drain-incr-def.
KIND_FIGURES = {"async def": "async", "def": "def"}


def _taskq_rows(server: Server, options: Options, known: dict[str, float], body: str,
                section: Section) -> list[list[str]]:
    """taskq with the peers' handler body, each handler kind at 16 handlers and at the
    concurrency the drain found best for its no-op, in one process and in a pool of two
    (one command either way, as the peers' two-process rows are); its figure is the best
    of them, and each handler kind's best is a figure of its own."""
    enqueue = known.get("enqueue-task")
    rows: list[list[str]] = []
    figure = _figure(body, "peer-taskq-drain")
    for name, noop, kind in TASKQ_KINDS[body]:
        best = int(known.get(f"drain-{noop}-concurrency", 64))
        shapes = [(processes, concurrency, 0) for processes in (1, 2)
                  for concurrency in sorted({*FEWER_HANDLERS, best})]
        shapes += list(PREFETCHED)
        for shape in shapes:
            drain = _taskq_drain(server, options, section, (name, kind, *shape), body)
            if drain is None:
                continue
            processes, concurrency, prefetch = shape
            pool = f" --processes {processes}" if processes > 1 else ""
            ahead = f" --prefetch {prefetch}" if prefetch else ""
            command = f"`taskq worker{pool} -c {concurrency}{ahead}`"
            rows.append(["**taskq**", f"{command}, `{kind}` handler",
                         BODIES[body], f"{options.scaled(FAST):,}",
                         rate(enqueue) + " (`Task.enqueue`)" if enqueue else "",
                         f"**{rate(drain.median)}**", drain.spread(), ""])
            for key in (figure, f"{figure}-{KIND_FIGURES[kind]}"):
                _keep_best(section, key, drain.median, command, shape)
    return rows


def _keep_best(section: Section, key: str, value: float, command: str,
               shape: tuple[int, int, int]) -> None:
    """Keep `value` as figure `key` if it beats the one there, labelled with the worker
    command that reached it, its processes, concurrency and prefetch as figures beside
    it (what the README recommends and the profile runs)."""
    if value <= section.figures.get(key, 0.0):
        return
    section.figures[key] = value
    section.labels[key] = command
    for part, amount in zip(("processes", "concurrency", "prefetch"), shape, strict=True):
        section.figures[f"{key}-{part}"] = amount


def _taskq_drain(server: Server, options: Options, section: Section,
                 config: tuple[str, str, int, int, int], body: str) -> Stat | None:
    """Repeated drains of one configuration, each checked by its count of no-op runs."""
    name, kind, processes, concurrency, prefetch = config
    n = options.scaled(FAST)
    drain = Stat()
    try:
        for _ in range(options.repeats):
            count = new_count(server, body, f"taskq-{uuid.uuid4().hex[:8]}")
            plan = DrainPlan(name, n, concurrency, processes, env=tuple(count.env().items()),
                             prefetch=prefetch)
            drain.add(run_drain(server, plan,
                                extra_checks=lambda _, c=count: c.check(server, n)).rate)
    except BenchError as e:
        section.fail(f"taskq, {kind} handler, {processes} x {concurrency} (prefetch "
                     f"{prefetch}), {BODIES[body]}", e)
        return None
    return drain


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    section = Section("peers", "Peers on the same Redis, same counted no-op",
                      ["queue", "worker command setting", "no-op body", "tasks",
                       "enqueue/s (one call per task)", "drain tasks/s (median)", "spread",
                       "note"])
    for body, what in BODIES.items():
        start = len(section.rows)
        for peer in PEERS:
            print(f"   {peer.title} ({what})", file=sys.stderr, flush=True)
            _peer_rows(server, options, peer, body, section)
        print(f"   taskq ({what})", file=sys.stderr, flush=True)
        section.rows[start:start] = _taskq_rows(server, options, known, body, section)
    section.notes.append(
        "Every queue, taskq included, runs the same no-op, counted one of two ways: "
        "a tally-file append (one byte written to a file opened with O_APPEND: the file's "
        "size is the count; bench/tally.py), the no-op of issue 7's drain target, "
        "and one INCR of a shared Redis counter through redis-py, the bench's first way of "
        "counting, the no-op of issue 21's drain target for `def` handlers; both targets "
        "are judged in the interleaved drain duels, not on this table. The INCR "
        "costs a worker a Redis round trip and, on this machine, more CPU than taskq's own "
        "work per task (see the profiles), so with it the drain times redis-py's client as "
        "much as the queue. Either count times the "
        "drain from the 5% mark to N and must then stay at exactly N: a lost task never "
        "reaches N, a doubled one passes it. taskq and the peers that drain thousands a "
        "second run --n/2 tasks; slower configurations a smaller N (--n/10; RQ's forking "
        "worker --n/100), reported per second. Peers run with "
        "their defaults apart from the worker command's concurrency setting; results are "
        "not stored (Celery `task_ignore_result`; the others keep their defaults).")
    return section
