"""Waiting on conditions with a deadline, and watching real worker processes, for tests."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import redis

from taskq.broker import Broker
from taskq.keys import QueueKeys
from taskq.processes import spawn, stop_all, taskq_command
from taskq.results import TaskRecord
from taskq.settings import Settings, Simulation, child_environment

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T | None], timeout: float = 10.0, what: str = "",
    interval: float = 0.02,
) -> T:
    """Poll `predicate` until it returns something truthy, and return that; fail the test
    with `what` if the deadline passes first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def wait_for_state(broker: Broker, task_id: str, state: str, timeout: float = 15.0) -> TaskRecord:
    """Wait until the task's record is in `state`, and return that record."""

    def reached() -> TaskRecord | None:
        record = broker.task(task_id)
        return record if record is not None and record.state == state else None

    return wait_until(reached, timeout, f"{task_id} to be {state}")


def event_types(client: redis.Redis, keys: QueueKeys, task_id: str) -> list[str]:
    """The types of the events a task's state changes appended to its queue's log."""
    rows = client.xrange(keys.events) or []
    return [str(f["type"]) for _, f in rows if f and f.get("task") == task_id]


def pid_of(worker_id: str) -> int:
    """The process id inside a worker id (`host-pid-suffix`; the host may hold dashes)."""
    return int(worker_id.rsplit("-", 2)[1])


def worker_env(redis_url: str, queue: str, ledger_path: Path, **overrides: str) -> dict[str, str]:
    """The environment of a test's `taskq worker` processes: short leases, backoffs and
    polls, the dedupe guard, no simulated failures; `overrides` (by variable) change any."""
    settings = Settings.from_env(
        {}, redis_url=redis_url, queue=queue, lease_seconds=1.0, backoff_base_seconds=0.05,
        backoff_max_seconds=0.1, poll_seconds=0.2, shutdown_grace_seconds=5.0)
    simulation = Simulation(work_seconds=0.05, ledger_path=str(ledger_path))
    return child_environment(settings, simulation, **overrides)


class WorkerProcesses:
    """`taskq worker` processes with one log file each; `stop_all` ends every one of them."""

    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        self.directory = directory
        self.env = env
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, *options: str, under: Sequence[str] = (),
              **overrides: str) -> subprocess.Popen[bytes]:
        """Start `taskq worker *options` (run by the command `under`, as `nohup`) with
        `overrides` on top of the environment."""
        log_path = self.directory / f"worker-{len(self.processes)}.log"
        process = spawn([*under, *taskq_command("worker", *options)],
                        {**self.env, **overrides}, str(log_path))
        self.processes.append(process)
        return process

    def log(self, process: subprocess.Popen[bytes]) -> str:
        index = self.processes.index(process)
        path = self.directory / f"worker-{index}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(self.log(p) for p in self.processes)

    def holding(self, worker_id: str) -> subprocess.Popen[bytes]:
        """The process whose worker id a task record names."""
        pid = pid_of(worker_id)
        return next(p for p in self.processes if p.pid == pid)

    def stop_all(self) -> None:
        stop_all(self.processes)
