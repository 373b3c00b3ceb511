"""Where the time goes when `def` handlers drain the no-op counted by one Redis INCR (issue
21's drain target): CPU per task of one `taskq worker --processes 2` command's whole
process tree and of Redis, the same for the fastest peer's worker command, py-spy's GIL
samples of taskq's tree split between the handler body and taskq's own code, and what
the INCR alone costs: the floor under any queue's drain on this machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bench.drain import check_drained, fill, worker_argv
from bench.harness import (
    POLL_SECONDS,
    BenchError,
    Child,
    Options,
    Section,
    Server,
    drain_timeout,
    rate,
)
from bench.peers import driver
from bench.profile import RATE_HZ, frame_label, is_bench_handler, py_spy, redis_cpu_seconds
from bench.tasks import COUNTER_KEY

HANDLER = "count_sync"
PROCESSES = 2
FACTOR = 2.5  # issue 21's drain target over the fastest peer
CORES = len(os.sched_getaffinity(0))
# The INCR alone runs on a key of its own, so no drain's count can see it.
FLOOR_KEY = "bench:floor"


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


def _wait(count: Callable[[], int], target: int, worker: Child, deadline: float) -> None:
    while (done := count()) < target:
        if not worker.alive():
            raise BenchError(f"worker exited after {done} tasks: {worker.tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"only {done} of {target} tasks within the drain's time: "
                             f"{worker.tail()}")
        time.sleep(POLL_SECONDS)


def window(server: Server, worker: Child, count: Callable[[], int], n: int,
           on_open: Callable[[], None] = lambda: None,
           on_close: Callable[[], None] = lambda: None) -> Window:
    """Usage at the 5% and 95% marks (start-up and the last stragglers left out), then
    the drain's end, checked to count exactly `n`."""
    deadline = time.monotonic() + drain_timeout(n, 20.0)
    marks = []
    for target, then in ((max(1, n // 20), on_open), (n - n // 20, on_close)):
        _wait(count, target, worker, deadline)
        tree, processes = tree_cpu_seconds(worker.pid)
        marks.append(Usage(time.perf_counter(), tree, redis_cpu_seconds(server), count(),
                           processes))
        then()
    _wait(count, n, worker, deadline)
    time.sleep(0.5)
    if count() != n:
        raise BenchError(f"{count()} INCRs for {n} tasks: some ran twice")
    if marks[1].done <= marks[0].done:
        raise BenchError(f"drain of {n} tasks too short to time; use a larger --n")
    return Window(marks[0], marks[1])


def _counter(server: Server) -> Callable[[], int]:
    return lambda: int(server.client.get(COUNTER_KEY) or 0)


@dataclass(frozen=True)
class Profiled:
    window: Window
    speedscope: dict[str, Any] | None


def taskq_drain(server: Server, n: int, shape: tuple[int, int, int],
                spy: str | None) -> Profiled:
    """One `taskq worker` command of `shape` (processes, concurrency, prefetch) draining
    `n` INCR-counted `def` no-ops; with `spy`, py-spy records the command's processes
    over the window."""
    server.flush()
    queue = f"profile-incr-{uuid.uuid4().hex[:8]}"
    broker = fill(server, queue, "bench.count_sync", n)
    out = server.logs / f"{queue}.speedscope.json"
    processes, concurrency, prefetch = shape
    worker = Child(worker_argv(queue, concurrency, processes, prefetch), server.env(),
                   server.logs / f"{queue}.log")
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
        measured = window(server, worker, _counter(server), n, record, stop)
        check_drained(server, broker, n)
    finally:
        for process in recorder:
            if process.poll() is None:
                process.kill()
                process.wait()
        worker.stop()
    if spy is None:
        return Profiled(measured, None)
    if not out.exists():
        raise BenchError("py-spy wrote no profile")
    return Profiled(measured, json.loads(out.read_text()))


def peer_drain(server: Server, peer: driver.Peer, config: driver.Config, n: int) -> Window:
    """The peer's worker command draining `n` of its INCR-counted no-ops, sent by its
    client one call each, as the peers table runs it."""
    directory = driver.bin_dir(peer)
    filled = driver.fill_with_client(server, peer, config, directory, n, "incr")
    worker = Child(driver.worker_command(config, directory, filled.queue, server),
                   filled.env, server.logs / f"{filled.queue}.log")
    try:
        return window(server, worker, filled.count.reader(server), n)
    finally:
        worker.stop(2.0)


@dataclass(frozen=True)
class Floor:
    """One INCR through redis-py, one connection, one at a time: its CPU on each side."""

    rate: float
    client_us: float
    redis_us: float

    @property
    def cap(self) -> float:
        """Tasks a second a drain whose queue cost nothing could reach: the INCR's CPU on
        both sides over the cores, and Redis's one thread for its part."""
        return min(CORES * 1e6 / (self.client_us + self.redis_us), 1e6 / self.redis_us)


def incr_floor(server: Server, n: int) -> Floor:
    """Timed in this process (nothing else runs meanwhile): redis-py and hiredis as the
    workers' handlers use them, with no queue, no thread hand-off and no contention."""
    server.flush()
    with redis.Redis.from_url(server.url) as client:
        client.incr(FLOOR_KEY)
        wall, cpu, server_cpu = time.perf_counter(), time.process_time(), \
            redis_cpu_seconds(server)
        for _ in range(n):
            client.incr(FLOOR_KEY)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        server_cpu = redis_cpu_seconds(server) - server_cpu
    return Floor(n / wall, cpu / n * 1e6, server_cpu / n * 1e6)


def gil_shares(speedscope: dict[str, Any]) -> tuple[int, Counter[str]]:
    """GIL samples of all the command's processes, each put in one part: `handler` (the
    no-op's body; `redis-py` when inside redis-py under it), `taskq` (a taskq frame on
    the stack), or `other` (interpreter and threading scaffolding)."""
    labels = [frame_label(frame) for frame in speedscope["shared"]["frames"]]
    parts: Counter[str] = Counter()
    for profile in speedscope["profiles"]:
        samples = profile.get("samples", [])
        weights = profile.get("weights") or [1] * len(samples)
        for stack, weight in zip(samples, weights, strict=False):
            if not stack:
                continue
            names = [labels[i] for i in stack]
            parts[_part(names)] += round(weight) if profile.get("unit") == "none" else 1
    return sum(parts.values()), parts


def _part(names: list[str]) -> str:
    for depth, name in enumerate(names):
        if is_bench_handler(name, HANDLER):
            below = names[depth + 1:]
            return "redis-py" if any("(redis/" in label for label in below) else "handler"
    return "taskq" if any("(taskq/" in label for label in names) else "other"


def peer_candidates(known: dict[str, float], labels: dict[str, str]
                ) -> list[tuple[driver.Peer, driver.Config]]:
    """The fastest peer of this run's INCR drains; when the peers did not run, every
    configuration the peers table gives thousands of tasks a second."""
    best = labels.get("peer-best-drain-incr")
    configs = [(peer, config) for peer in driver.PEERS for config in peer.configs]
    chosen = [(p, c) for p, c in configs if f"{p.title} ({c.label})" == best]
    if chosen and known.get("peer-best-drain-incr"):
        return chosen
    return [(p, c) for p, c in configs if c.scale == driver.FAST]


def _cpu_row(what: str, command: str, measured: Window) -> list[str]:
    both = measured.tree_us + measured.redis_us
    return [what, command, rate(measured.rate), str(measured.first.processes),
            f"{measured.tree_us:,.1f} µs", f"{measured.redis_us:,.1f} µs",
            rate(CORES * 1e6 / both)]


def _record_window(section: Section, name: str, measured: Window) -> None:
    section.figures[f"{name}-rate"] = measured.rate
    section.figures[f"{name}-worker-us"] = measured.tree_us
    section.figures[f"{name}-redis-us"] = measured.redis_us


def _peers(server: Server, options: Options, section: Section, known: dict[str, float],
           labels: dict[str, str]) -> tuple[str, Window] | None:
    """Each candidate peer's drain; the fastest of them, named."""
    fastest: tuple[str, Window] | None = None
    for peer, config in peer_candidates(known, labels):
        title = f"{peer.title} ({config.label})"
        print(f"   {title}", file=sys.stderr, flush=True)
        try:
            measured = peer_drain(server, peer, config, options.n)
        except (BenchError, OSError, subprocess.TimeoutExpired) as e:
            section.fail(title, BenchError(str(e)))
            continue
        section.rows.append(_cpu_row(title, "its worker command in the peers table", measured))
        if fastest is None or measured.rate > fastest[1].rate:
            fastest = (title, measured)
    return fastest


def _shares_note(section: Section, speedscope: dict[str, Any]) -> None:
    total, parts = gil_shares(speedscope)
    if not total:
        section.notes.append("py-spy recorded no samples.")
        return
    handler = (parts["handler"] + parts["redis-py"]) / total
    section.figures["profile-incr-handler-share"] = handler
    section.figures["profile-incr-redis-py-share"] = parts["redis-py"] / total
    section.figures["profile-incr-taskq-share"] = parts["taskq"] / total
    section.notes.append(
        f"GIL samples of taskq's worker processes ({total:,}, py-spy --subprocesses --gil "
        f"at {RATE_HZ} Hz over the window): the handler body {handler:.0%} (redis-py's "
        f"INCR under it {parts['redis-py'] / total:.0%}), taskq's own code "
        f"{parts['taskq'] / total:.0%}, the rest (interpreter, threading) "
        f"{parts['other'] / total:.0%}. A thread waiting on a socket holds no GIL, so the "
        f"samples are CPU in Python, not the time the round trips take.")


def _floor_note(section: Section, floor: Floor, taskq: Window,
                peer: tuple[str, Window] | None) -> None:
    section.figures["profile-incr-floor"] = floor.cap
    section.figures["profile-incr-incr-client-us"] = floor.client_us
    section.figures["profile-incr-incr-redis-us"] = floor.redis_us
    incr = floor.client_us + floor.redis_us
    own = taskq.tree_us + taskq.redis_us - incr
    section.figures["profile-incr-taskq-own-us"] = own
    text = (f"At zero queue cost, the handler's INCR alone would cap the rate at "
            f"{rate(floor.cap)} on {CORES} cores: {floor.client_us:.1f} µs of client CPU "
            f"and {floor.redis_us:.1f} µs of Redis CPU per INCR. taskq's `def` drain spent "
            f"{taskq.tree_us + taskq.redis_us:.1f} µs per task on both sides, so at most "
            f"{own:.1f} µs of it was the queue's own work (the INCR was timed alone, "
            f"without a handler thread's hand-offs).")
    if peer is not None:
        needed = FACTOR * peer[1].rate
        budget = CORES * 1e6 / needed
        section.figures["profile-incr-needed"] = needed
        section.figures["profile-incr-budget-us"] = budget
        text += (f" {FACTOR:g}x {peer[0]}'s {rate(peer[1].rate)} here is {rate(needed)}: "
                 f"on {CORES} cores a task may then cost {budget:.1f} µs of CPU on both "
                 f"sides, the INCR included, which leaves the queue {budget - incr:.1f} µs "
                 f"a task where taskq spends {own:.1f} µs"
                 + (" (the INCR alone costs more than that: no queue can reach it here)."
                    if budget <= incr else "."))
    section.notes.append(text)


def measure(server: Server, options: Options, known: dict[str, float],
            labels: dict[str, str] | None = None) -> Section:
    best = "peer-taskq-drain-incr-def"
    shape = (int(known.get(f"{best}-processes", PROCESSES)),
             int(known.get(f"{best}-concurrency", 64)), int(known.get(f"{best}-prefetch", 0)))
    ahead = f" --prefetch {shape[2]}" if shape[2] else ""
    command = f"`taskq worker --processes {shape[0]} -c {shape[1]}{ahead}`"
    section = Section("profile-incr", f"Profile: `def` handlers counting each task with one "
                      f"Redis INCR, {command} beside the fastest peer, {options.n:,} tasks",
                      ["run", "worker command", "tasks/s (5%-95%)", "processes",
                       "worker processes' CPU per task", "Redis CPU per task",
                       f"rate the two allow on {CORES} cores"])
    spy = py_spy()
    try:
        floor = incr_floor(server, options.scaled(1 / 4))
        plain = taskq_drain(server, options.n, shape, None)
        profiled = taskq_drain(server, options.n, shape, spy) if spy else None
    except (BenchError, OSError, subprocess.TimeoutExpired) as e:
        section.fail("taskq", BenchError(str(e)))
        return section
    section.rows.append(_cpu_row("**taskq**", command, plain.window))
    _record_window(section, "profile-incr-taskq", plain.window)
    if profiled is not None:
        section.rows.append(_cpu_row("taskq under py-spy", command, profiled.window))
    peer = _peers(server, options, section, known, labels or {})
    if peer is not None:
        _record_window(section, "profile-incr-peer", peer[1])
        section.labels["profile-incr-peer"] = peer[0]
    section.rows.append(["the INCR alone (redis-py, one connection, one at a time)", "",
                         rate(floor.rate), "1", f"{floor.client_us:,.1f} µs",
                         f"{floor.redis_us:,.1f} µs", f"**{rate(floor.cap)}**"])
    section.notes.append(
        "CPU per task is each process's user + system time (/proc: the worker command and "
        "every process under it, children they reaped included) and Redis's "
        "`used_cpu_sys + used_cpu_user`, both between the drain's 5% and 95% marks by its "
        "INCR count, divided by the tasks counted between them; each drain then checks "
        "the count ends at exactly N. taskq's queue is filled by `enqueue_many`, each "
        "peer's by its client one call a task, as in the peers table. The cap is the "
        "machine's cores over the two CPU figures together (the INCR alone: also Redis's "
        "one thread over its part).")
    if profiled is not None and profiled.speedscope is not None:
        _shares_note(section, profiled.speedscope)
    else:
        section.notes.append("No GIL shares: py-spy is not installed "
                             "(`pip install -e '.[bench]'`).")
    _floor_note(section, floor, plain.window, peer)
    return section
