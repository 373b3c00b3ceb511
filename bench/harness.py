"""What every measurement shares: options, the private Redis, figures, and child processes."""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import redis

from taskq import Settings
from taskq.processes import spawn, stop_all
from taskq.tools.embedded import EmbeddedRedis, free_port

ROOT = Path(__file__).resolve().parent.parent
POLL_SECONDS = 0.005


class BenchError(Exception):
    """Raised when a run cannot be trusted: a task lost or run twice, a worker that died,
    a server that did not come up. The bench reports it and exits non-zero."""


@dataclass(frozen=True)
class Options:
    """What the command line asked for."""

    n: int = 20_000
    repeats: int = 3
    quick: bool = False
    only: frozenset[str] = frozenset()
    out: Path = ROOT / "docs" / "benchmarks.md"

    def wants(self, name: str) -> bool:
        return not self.only or name in self.only

    def scaled(self, fraction: float, floor: int = 20) -> int:
        """A task count: `fraction` of `--n`, at least `floor`."""
        return max(floor, round(self.n * fraction))


@dataclass
class Stat:
    """One figure over several runs: shown as the median, with the spread beside it."""

    values: list[float] = field(default_factory=list)

    def add(self, value: float) -> None:
        self.values.append(value)

    @property
    def median(self) -> float:
        return statistics.median(self.values) if self.values else float("nan")

    def spread(self) -> str:
        """The smallest and largest run relative to the median, e.g. `-3%/+5%`."""
        if len(self.values) < 2 or not self.median:
            return ""
        low, high = min(self.values) / self.median - 1, max(self.values) / self.median - 1
        return f"{low:+.0%}/{high:+.0%}"


def rate(value: float) -> str:
    """A rate for a table: `12,345/s`."""
    return f"{value:,.0f}/s"


@dataclass
class Section:
    """One measurement's table, notes and the figures the targets are judged on."""

    name: str
    title: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, float] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    def fail(self, what: str, error: Exception) -> None:
        """Record a run that could not be trusted; the bench exits non-zero."""
        self.failures.append(f"{what}: {error}")
        self.rows.append([what, f"FAILED: {error}"] + [""] * (len(self.header) - 2))


class Server:
    """The private redis-server every measurement and peer uses, on a loopback TCP port."""

    def __init__(self) -> None:
        binary = Settings.from_env().redis_server
        self.embedded = EmbeddedRedis(binary=binary, port=free_port()).start()
        self.url = self.embedded.url
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        self.logs = Path(tempfile.mkdtemp(prefix="taskq-bench-logs-"))

    @property
    def version(self) -> str:
        return str(self.client.info("server")["redis_version"])

    def flush(self) -> None:
        """Empty the server: without a socket timeout, as a million keys take seconds."""
        with redis.Redis.from_url(self.url, socket_timeout=None) as client:
            client.flushall()

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a child: this server, and the repository importable."""
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, "REDIS_URL": self.url, "PYTHONPATH": path, **extra}

    def close(self) -> None:
        self.client.close()
        self.embedded.cleanup()


class Child:
    """A child process in its own session, with its output in a log file."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], log: Path) -> None:
        self.argv = list(argv)
        self.log = log
        self.process = spawn(self.argv, env, str(log))

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 8) -> str:
        if not self.log.exists():
            return "(no output)"
        text = self.log.read_text(errors="replace").strip().splitlines()[-lines:]
        return " | ".join(text) or "(no output)"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL; then its whole session, for pool children left over."""
        stop_all([self.process], timeout)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)


def python_module(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


@dataclass(frozen=True)
class Drained:
    """A timed drain: the rate between the 5% mark and the last task."""

    rate: float
    seconds: float


def time_drain(
    count: Callable[[], int],
    n: int,
    workers: Sequence[Child],
    timeout: float,
    settle: float = 0.3,
    on_done: Callable[[], None] | None = None,
) -> Drained:
    """Wait until `count()` reaches `n`, timing from the 5% mark (so worker start-up is
    not counted) to the last completion; call `on_done`, then check the count stays at
    exactly `n`."""
    mark = max(1, n // 20)
    deadline = time.monotonic() + timeout
    start: tuple[float, int] | None = None
    done = count()
    while done < n:
        if time.monotonic() > deadline:
            raise BenchError(f"only {done} of {n} tasks completed within {timeout:.0f}s "
                             f"(lost?); worker output: {workers[0].tail()}")
        dead = [w for w in workers if not w.alive()]
        if dead:
            raise BenchError(f"worker exited with {dead[0].process.returncode} after {done} "
                             f"of {n} tasks: {dead[0].tail()}")
        time.sleep(POLL_SECONDS)
        done = count()
        if start is None and done >= mark:
            start = (time.perf_counter(), done)
    end = time.perf_counter()
    if on_done is not None:
        on_done()
    time.sleep(settle)
    final = count()
    if final != n:
        raise BenchError(f"{final} completions for {n} tasks: some ran twice")
    if start is None or end <= start[0] or n <= start[1]:
        raise BenchError(f"drain of {n} tasks too short to time; use a larger --n")
    return Drained((n - start[1]) / (end - start[0]), end - start[0])


def wait_for(count: Callable[[], int], target: int, worker: Child, deadline: float,
             poll: float = POLL_SECONDS) -> None:
    """Block until `count()` reaches `target`; a BenchError, with the worker's last log
    lines, if the worker exits first or monotonic `deadline` passes."""
    while (done := count()) < target:
        if not worker.alive():
            raise BenchError(f"worker exited after {done} of {target} tasks: {worker.tail()}")
        if time.monotonic() > deadline:
            raise BenchError(f"only {done} of {target} tasks ran in the time given: "
                             f"{worker.tail()}")
        time.sleep(poll)


def run_all(count: Callable[[], int], n: int, worker: Child, timeout: float) -> None:
    """Wait until the worker has run all `n` tasks, then check it ran none twice (the
    drain is not timed here, so it may be as short as it likes)."""
    wait_for(count, n, worker, time.monotonic() + timeout, poll=0.05)
    time.sleep(0.5)
    if count() != n:
        raise BenchError(f"{count()} runs for {n} tasks: some ran twice")


def used_memory(server: Server) -> int:
    """The server's `used_memory` (INFO memory), in bytes."""
    return int(server.client.info("memory")["used_memory"])


def per_task(before: int, after: int, n: int) -> float:
    """Bytes per task: the growth of `used_memory` over `n` tasks."""
    return (after - before) / n


def drain_timeout(n: int, slowest_rate: float = 100.0) -> float:
    """Long enough for `n` tasks at `slowest_rate`, plus start-up."""
    return 30.0 + n / slowest_rate


def run_quietly(argv: Sequence[str], env: dict[str, str], timeout: float) -> str:
    """Run a helper to completion; its stdout, or a BenchError with its stderr."""
    try:
        done = subprocess.run(list(argv), env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise BenchError(f"{' '.join(argv[:4])} timed out after {timeout:.0f}s") from e
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-5:])
        raise BenchError(f"{' '.join(argv[:4])} exited {done.returncode}: {tail}")
    return done.stdout
