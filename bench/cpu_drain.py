"""`def` drains timed between their 5% and 95% marks, with the CPU each side spent: the
worker command's whole process tree and Redis. taskq's drain runs a worker command of a
given shape (the README's recommended one by default); a peer's, its worker command from
the peers table. The drain duel and the `def` profile both measure with these."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.drain import check_drained, fill, stats_field, worker_argv
from bench.harness import BenchError, Child, Server, drain_timeout, wait_for
from bench.incr_floor import CORES
from bench.peers import driver
from bench.profile import RATE_HZ, redis_cpu_seconds
from bench.tally import TALLY_ENV
from bench.tally import count as tally_count
from bench.tasks import COUNTER_KEY

HANDLER = "count_sync"
# The same `def` no-op counted by a one-byte append to a tally file (bench/tally.py).
TALLY = "tally_sync"
# The same `def` no-op uncounted: what is left is the queue's own cost.
NOOP = "noop_sync"
# The README's recommendation for `def` handlers: a process per core and one more, as
# Redis shares the cores, each with 16 handler threads and 112 tasks leased ahead.
RECOMMENDED = (CORES + 1, 16, 112)


def command(shape: tuple[int, int, int]) -> str:
    processes, concurrency, prefetch = shape
    ahead = f" --prefetch {prefetch}" if prefetch else ""
    return f"`taskq worker --processes {processes} -c {concurrency}{ahead}`"


def tree_cpu_seconds(root: int) -> tuple[float, int]:
    """User + system CPU seconds of a process and all its descendants (the children each
    has reaped included), and how many are alive. By parent, not session: a `taskq
    worker` pool starts its copies in sessions of their own."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it exited while the tree was read
        ticks = sum(int(f) for f in fields[11:15])
        stats[int(entry.name)] = (int(fields[1]), ticks / os.sysconf("SC_CLK_TCK"))
    tree, grew = {root}, True
    while grew:
        found = {pid for pid, (parent, _) in stats.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    alive = tree & stats.keys()
    return sum(stats[pid][1] for pid in alive), len(alive)


@dataclass(frozen=True)
class Usage:
    """A moment of a drain: wall clock, CPU used so far by the worker command's processes
    and by Redis, and the tasks counted."""

    wall: float
    tree: float
    redis: float
    done: int
    processes: int


@dataclass(frozen=True)
class Window:
    """A drain between its 5% and 95% marks: what each task cost, and the rate."""

    first: Usage
    last: Usage

    @property
    def tasks(self) -> int:
        return self.last.done - self.first.done

    @property
    def rate(self) -> float:
        return self.tasks / (self.last.wall - self.first.wall)

    @property
    def tree_us(self) -> float:
        return (self.last.tree - self.first.tree) / self.tasks * 1e6

    @property
    def redis_us(self) -> float:
        return (self.last.redis - self.first.redis) / self.tasks * 1e6


def window(server: Server, worker: Child, count: Callable[[], int], n: int,
           on_open: Callable[[], None] = lambda: None,
           on_close: Callable[[], None] = lambda: None) -> Window:
    """Usage at the 5% and 95% marks (start-up and the last stragglers left out), then
    the drain's end, checked to count exactly `n`."""
    deadline = time.monotonic() + drain_timeout(n, 20.0)
    marks = []
    for target, then in ((max(1, n // 20), on_open), (n - n // 20, on_close)):
        wait_for(count, target, worker, deadline)
        tree, processes = tree_cpu_seconds(worker.pid)
        marks.append(Usage(time.perf_counter(), tree, redis_cpu_seconds(server), count(),
                           processes))
        then()
    wait_for(count, n, worker, deadline)
    time.sleep(0.5)
    if count() != n:
        raise BenchError(f"{count()} runs counted for {n} tasks: some ran twice")
    if marks[1].done <= marks[0].done:
        raise BenchError(f"drain of {n} tasks too short to time; use a larger --n")
    return Window(marks[0], marks[1])


def _counter(server: Server) -> Callable[[], int]:
    return lambda: int(server.client.get(COUNTER_KEY) or 0)


def _count_of(server: Server, queue: str, handler: str, tally: Path) -> Callable[[], int]:
    """How a drain of `handler` is counted: the INCR counter, the tally file, or (the
    uncounted no-op) the queue's completed total."""
    if handler == HANDLER:
        return _counter(server)
    if handler == TALLY:
        return lambda: tally_count(tally)
    return stats_field(server, queue, "completed:completed")


@dataclass(frozen=True)
class Profiled:
    """A drain's window; Redis's time inside taskq's scripts per task (EVALSHA's usec
    over the whole drain, maintenance included); the py-spy profile if one was taken."""

    window: Window
    script_us: float
    speedscope: dict[str, Any] | None


def taskq_drain(server: Server, n: int, shape: tuple[int, int, int],
                spy: str | None, handler: str = HANDLER) -> Profiled:
    """One `taskq worker` command of `shape` (processes, concurrency, prefetch) draining
    `n` `def` no-ops (`handler`: INCR-counted, TALLY-counted, or the uncounted NOOP,
    counted by the queue's completed total); with `spy`, py-spy records the command's
    processes over the window."""
    server.flush()
    queue = f"profile-incr-{uuid.uuid4().hex[:8]}"
    broker = fill(server, queue, f"bench.{handler}", n)
    tally = server.logs / f"{queue}.tally"
    count = _count_of(server, queue, handler, tally)
    out = server.logs / f"{queue}.speedscope.json"
    processes, concurrency, prefetch = shape
    server.client.config_resetstat()
    worker = Child(worker_argv(queue, concurrency, processes, prefetch),
                   server.env(**{TALLY_ENV: str(tally)}), server.logs / f"{queue}.log")
    recorder: list[subprocess.Popen[bytes]] = []

    def record() -> None:
        if spy is not None:
            recorder.append(subprocess.Popen(
                [spy, "record", "--pid", str(worker.pid), "--subprocesses", "--rate",
                 str(RATE_HZ), "--nonblocking", "--gil", "--format", "speedscope",
                 "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))

    def stop() -> None:
        for process in recorder:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=30)

    try:
        measured = window(server, worker, count, n, record, stop)
        check_drained(server, broker, n)
        scripts = server.client.info("commandstats").get("cmdstat_evalsha", {})
    finally:
        for process in recorder:
            if process.poll() is None:
                process.kill()
                process.wait()
        worker.stop()
    script_us = float(scripts.get("usec", 0)) / n
    if spy is None:
        return Profiled(measured, script_us, None)
    if not out.exists():
        raise BenchError("py-spy wrote no profile")
    return Profiled(measured, script_us, json.loads(out.read_text()))


def peer_drain(server: Server, peer: driver.Peer, config: driver.Config, n: int,
               body: str = "incr") -> Window:
    """The peer's worker command draining `n` of its no-ops counted as `body` says
    (`incr` or `tally`), sent by its client one call each, as the peers table runs it."""
    directory = driver.bin_dir(peer.own_venv)
    filled = driver.fill_with_client(server, peer, config, directory, n, body)
    worker = Child(driver.worker_command(config, directory, filled.queue, server),
                   filled.env, server.logs / f"{filled.queue}.log")
    try:
        return window(server, worker, filled.count.reader(server), n)
    finally:
        worker.stop(2.0)
