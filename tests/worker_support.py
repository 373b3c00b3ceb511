"""A Worker run on a thread, as `taskq worker` runs it in a process, for worker tests."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from conftest import ON_CLUSTER
from taskq import App, Worker
from taskq.broker import Broker
from taskq.settings import Settings
from taskq.tools.embedded import EmbeddedRedis
from taskq.worker.queues import QueueChoice
from waiting import WorkerProcesses, worker_env


class WorkerThread:
    """One Worker running its loop on a thread, as `taskq worker` runs it in a process."""

    def __init__(self, app: App, settings: Settings, concurrency: int,
                 queues: QueueChoice | None = None, on: str | None = None) -> None:
        """`on`: the queue of its broker, as `--queue` names one (default the app's)."""
        self.broker = Broker.from_settings(settings, on or app.queue)
        self.worker = Worker(app, settings=settings, broker=self.broker, queues=queues,
                             concurrency=concurrency)
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, name="test-worker", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.status = self.worker.run(install_signal_handlers=False)

    def stop(self, timeout: float = 10.0) -> None:
        self.worker.stop("test is done")
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the worker did not stop"

    def close(self, client: redis.Redis) -> None:
        """Stop, then let the wakers out of their blocking pops before closing their
        connection."""
        if self.thread.is_alive():
            self.stop()
        for queue in self.worker.queues:
            client.lpush(queue.keys.wake, "1")
        for thread in (*self.worker.wakers, self.worker.heartbeat):
            thread.join(5)
        self.broker.client.close()


@contextmanager
def worker_running(app: App, settings: Settings, concurrency: int = 4) -> Iterator[WorkerThread]:
    """A WorkerThread for `app` while the block runs, closed after it."""
    thread = WorkerThread(app, settings, concurrency)
    try:
        yield thread
    finally:
        thread.close(app.broker.client)  # type: ignore[arg-type]


StartWorker = Callable[..., WorkerThread]


@pytest.fixture
def start_worker(app: App, settings: Settings, client: redis.Redis) -> Iterator[StartWorker]:
    """Starts WorkerThreads for the test's app (settings overridden per call), and closes
    every one it started when the test ends."""
    started: list[WorkerThread] = []

    def start(concurrency: int = 1, queues: QueueChoice | None = None,
              **overrides: Any) -> WorkerThread:
        running = WorkerThread(app, dataclasses.replace(settings, **overrides), concurrency,
                               queues)
        started.append(running)
        return running

    yield start
    for running in started:
        running.close(client)


@pytest.fixture
def workers(redis_server: EmbeddedRedis, queue: Broker, ledger_path: Path,
            tmp_path: Path) -> Iterator[WorkerProcesses]:
    """`taskq worker` processes on the test's own queue, with the test settings of
    `worker_env` (on the local cluster when the suite runs there); a test module may
    define its own `workers` with other settings."""
    cluster = {"TASKQ_REDIS_CLUSTER": "1"} if ON_CLUSTER else {}
    processes = WorkerProcesses(tmp_path, worker_env(redis_server.url, queue.queue,
                                                     ledger_path, **cluster))
    yield processes
    processes.stop_all()
