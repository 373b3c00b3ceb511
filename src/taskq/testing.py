"""Run an App's tasks through a real Redis and a real worker inside the user's own tests.

`TaskRunner` starts a private redis-server (or uses the Redis you name), points the app
at it, and runs a `Worker` for the app on a thread of the test process. Tasks enqueued
the usual way (`task.enqueue(...)`, from the test or from the code it tests) then go
through the same scripts, leases, retries, results and DLQ as in production: nothing
is run "eagerly" in the caller's thread. `run_until_idle()` waits until the queue has
nothing left to do and reports what ended::

    import pytest
    from taskq.testing import TaskRunner

    from myproject.tasks import app, send_welcome

    @pytest.fixture
    def tasks():
        with TaskRunner(app) as runner:
            yield runner

    def test_welcome_mail_is_sent(tasks):
        handle = send_welcome.enqueue(42)
        report = tasks.run_until_idle()
        assert report.result(handle) == "sent"

Calling a task function directly (`send_welcome(42)`) still runs it in place, without
the queue; `current_task()` is only there for a task a worker runs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, fields, replace
from types import TracebackType
from typing import Any, TypeVar, overload

from taskq.app import App, Task, _LoopBroker
from taskq.boundary import redis_errors
from taskq.broker import Broker
from taskq.errors import (
    ConfigError,
    IdleTimeoutError,
    NoResultError,
    TaskCancelledError,
    TaskFailed,
    TaskqError,
    UpstreamFailed,
)
from taskq.feed.cursor import Cursor
from taskq.feed.log import Gap, Row, decode
from taskq.handle import TaskHandle, outcome
from taskq.limits import CONCURRENCY, TIMEOUT, Seconds, shown
from taskq.registry import read_workers
from taskq.results import Enqueued
from taskq.scripts import source
from taskq.settings import Settings
from taskq.snapshot import QueueSnapshot, take_snapshot
from taskq.tools.embedded import EmbeddedRedis
from taskq.worker import Worker

# What a TaskRunner changes in the app's settings, unless `overrides` says otherwise:
# retries come back within 10-50 ms instead of seconds, and an idle worker looks for
# due work every 50 ms. The lease is left as it is: no worker dies inside one test
# process, and a short lease would only turn a slow handler into a retried one.
TEST_SETTINGS: Mapping[str, object] = {
    "backoff_base_seconds": 0.01,
    "backoff_max_seconds": 0.05,
    "poll_seconds": 0.05,
    "shutdown_grace_seconds": 5.0,
}

# The longest one blocking wait for the queue's next event lasts: well inside the
# client's socket timeout, and the worker thread's health is checked between waits.
WAIT_SLICE_SECONDS = 1.0
# Rows of the event log read per round trip while making a report.
READ_BATCH = 1000
# Tasks named one by one in a timeout's message.
PENDING_SHOWN = 10
# The states in which a task has ended: its result or its error is final.
ENDED = ("completed", "dead", "cancelled")


# The result type of a handle a report is asked about.
T = TypeVar("T")


@dataclass(frozen=True)
class RunReport:
    """The tasks that ended during a run (since the runner started, or since its last
    report), each once, in the order they ended.

    `results` maps the id of each task that completed to its return value (None for a
    task registered with `store_result=False`); `failed` maps the id of each task that
    died (used up its retries) to its `TaskFailed`: error type, message, the worker's
    traceback and the number of attempts; `cancelled` lists the ids of the tasks that
    ended cancelled, a workflow's steps its failure skipped among them (`upstream` maps
    each to its `UpstreamFailed`); `names` maps every id of all three to its task's
    name."""

    results: Mapping[str, Any]
    failed: Mapping[str, TaskFailed]
    names: Mapping[str, str]
    cancelled: Sequence[str] = ()
    upstream: Mapping[str, UpstreamFailed] = field(default_factory=dict)

    @property
    def dead(self) -> list[str]:
        """The ids of the tasks that died, in the order they did."""
        return list(self.failed)

    @overload
    def result(self, task: TaskHandle[T]) -> T: ...
    @overload
    def result(self, task: str | Enqueued) -> Any: ...
    def result(self, task: str | Enqueued) -> Any:
        """The return value of `task` (a task id, or the handle `enqueue` returned);
        raises its `TaskFailed` when it died, `TaskCancelledError` when it was cancelled,
        and `TaskqError` when it did not end during this run."""
        task_id = task.task_id if isinstance(task, Enqueued) else task
        if task_id in self.failed:
            raise self.failed[task_id]
        if task_id in self.upstream:
            raise self.upstream[task_id]
        if task_id in self.cancelled:
            raise TaskCancelledError(task_id)
        if task_id not in self.results:
            raise TaskqError(f"task {shown(task_id)} did not end during this run (ended: "
                             f"{len(self.results)} completed, {len(self.failed)} dead)")
        return self.results[task_id]

    def values(self, task: Task[Any, Any]) -> list[Any]:
        """The return values of the completed runs of `task`, in the order they ended:
        what the code under test enqueued, without holding its handles."""
        return [value for task_id, value in self.results.items()
                if self.names[task_id] == task.name]


class TaskRunner:
    """An embedded Redis and an in-process worker for `app`, for the length of a `with`.

    On entry it starts a private redis-server in a temporary directory (or uses
    `redis_url`, as it is: flush it yourself between tests), points the app at it (its
    settings and the broker `enqueue` uses), and starts a real `Worker` running the
    app's tasks with `concurrency` handlers. The worker's settings are the app's with
    `TEST_SETTINGS` and then `overrides` (Settings field names, as `Settings(...)` takes
    them) applied. On exit it stops the worker, waits for its threads, puts the app's
    settings and broker back and stops the server. A sharded app's queue runs here as
    one queue: its shards decide where tasks live, not what they do.
    """

    def __init__(self, app: App, *, concurrency: int = 4, redis_url: str | None = None,
                 overrides: Mapping[str, object] | None = None) -> None:
        if not isinstance(app, App):
            raise ConfigError(f"TaskRunner runs the tasks of a taskq.App, not {shown(app)}")
        self.app = app
        self.concurrency = CONCURRENCY.check(concurrency, "concurrency", ConfigError)
        self.redis_url = redis_url
        self.overrides = dict(overrides or {})
        unknown = set(self.overrides) - {f.name for f in fields(Settings)}
        if unknown:
            raise ConfigError(f"unknown settings in overrides: {', '.join(sorted(unknown))}")
        if "redis_url" in self.overrides:
            raise ConfigError("give TaskRunner(redis_url=...) rather than a redis_url in "
                              "overrides: without it the runner starts its own server")
        self.server: EmbeddedRedis | None = None
        self._stack: ExitStack | None = None
        self._settings: Settings | None = None
        self._broker: Broker | None = None
        self._worker: Worker | None = None
        self._thread: threading.Thread | None = None
        self._worker_error: BaseException | None = None
        self._cursor = Cursor.start()

    # -- entering and leaving ------------------------------------------------------------

    def __enter__(self) -> TaskRunner:
        if self._stack is not None:
            raise TaskqError("this TaskRunner is already running; make one per test")
        stack = self._stack = ExitStack()
        try:
            self._start(stack)
        except BaseException:
            self._stack = None
            stack.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def _start(self, stack: ExitStack) -> None:
        url = self.redis_url
        if url is None:
            self.server = stack.enter_context(EmbeddedRedis(binary=self.app.settings.redis_server))
            stack.callback(setattr, self, "server", None)
            url = self.server.url
        settings = self._settings = self._settings_for(url)
        self._broker = self._connect(stack, settings)
        if self.redis_url is not None:
            self._refuse_other_workers(self._broker)
        self._cursor = self._head()
        stack.enter_context(pointed_at(self.app, settings, self._connect(stack, settings)))
        self._worker = Worker(self.app, settings=settings,
                              broker=self._connect(stack, settings),
                              concurrency=self.concurrency)
        self._worker_error = None
        self._thread = threading.Thread(target=self._run_worker, name="taskq-testing-worker",
                                        daemon=True)
        stack.callback(self._stop_worker)
        self._thread.start()

    def _refuse_other_workers(self, broker: Broker) -> None:
        """Raise ConfigError if a live worker already serves the app's queue on the given
        Redis: it would lease the test's tasks and run its own code for them, and the
        test would check what that worker did."""
        _, workers = read_workers(broker, limit=3)
        if workers:
            seen = ", ".join(f"{w.worker_id} (pid {w.pid} on {w.host})" for w in workers)
            raise ConfigError(
                f"queue {self.app.queue!r} on the TaskRunner's redis_url is already served "
                f"by a running worker: {seen}; it would run the test's tasks with its own "
                "code. Leave redis_url out (the runner starts a Redis of its own) or stop "
                "that worker")

    def _settings_for(self, url: str) -> Settings:
        values: dict[str, Any] = {
            **TEST_SETTINGS, "redis_url": url, "redis_url_given": True,
            "redis_cluster": False, "concurrency": self.concurrency, **self.overrides}
        return replace(self.app.settings, **values)  # checked again by Settings itself

    def _connect(self, stack: ExitStack, settings: Settings) -> Broker:
        """A broker on a connection of its own, closed when the runner closes."""
        broker = Broker.from_settings(settings, self.app.queue)
        stack.callback(broker.client.close)
        return broker

    def _run_worker(self) -> None:
        assert self._worker is not None
        try:
            self._worker.run(install_signal_handlers=False)
        except BaseException as e:
            self._worker_error = e

    def _stop_worker(self) -> None:
        """Stop the worker as SIGTERM would (draining its handlers for the shutdown
        grace), then wait for every thread it started."""
        worker, thread = self._worker, self._thread
        assert worker is not None and thread is not None
        worker.stop("the TaskRunner is closing")
        grace = worker.settings.shutdown_grace_seconds
        # A handler the worker let go at its time limit runs on in its thread: it has
        # the rest of the grace to return, as the worker's own handlers had.
        deadline = time.monotonic() + grace + 1
        thread.join(grace + 10)
        # The waker blocks at most a poll; the heartbeat wakes as soon as it is stopped.
        for part in (worker.waker, worker.heartbeat):
            if part.ident is not None:
                part.join(worker.settings.redis_timeout_seconds + 1)
        running = [t.name for t in (thread, worker.waker, worker.heartbeat) if t.is_alive()]
        running += worker.runner.join(max(1.0, deadline - time.monotonic()))
        if running:
            raise TaskqError(f"the test worker's threads are still running after its "
                             f"shutdown grace ({grace:g}s): {', '.join(running)}; a "
                             "handler has not returned")

    # -- while running -------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """The settings the app and its worker use while the runner runs."""
        if self._settings is None:
            raise TaskqError("the TaskRunner has not started: use it in a `with` block")
        return self._settings

    @property
    def broker(self) -> Broker:
        """A broker of the runner's own on the app's queue, to look at the queue."""
        if self._broker is None or self._stack is None:
            raise TaskqError("the TaskRunner is not running: use it in a `with` block")
        return self._broker

    def run_until_idle(self, timeout: Seconds = 10.0) -> RunReport:
        """Wait until the queue is idle, then report the tasks that ended since the
        runner started or since the last report.

        Idle means nothing ready, nothing running (leased) and nothing delayed, whether
        due or not: a retry waiting out its backoff keeps the queue busy, and so does a
        task enqueued with a delay. Raises `IdleTimeoutError`, listing what is still
        pending, when the queue is not idle within `timeout` seconds; the worker keeps
        running, so a later call can wait longer."""
        timeout = TIMEOUT.check(timeout, "timeout")
        broker = self.broker
        deadline = time.monotonic() + timeout
        while True:
            self._check_worker()
            snapshot = take_snapshot(broker, limit=0)
            counts = snapshot.counts
            if counts.ready == counts.leased == counts.delayed == 0:
                return self._report(snapshot.seq)
            left = deadline - time.monotonic()
            if left <= 0:
                raise IdleTimeoutError(self._pending(timeout))
            self._wait_for_event(snapshot.seq, min(left, WAIT_SLICE_SECONDS))

    def _check_worker(self) -> None:
        assert self._thread is not None
        if not self._thread.is_alive():
            why = "it ended" if self._worker_error is None else repr(self._worker_error)
            raise TaskqError(f"the test worker has stopped ({why}), so the queue cannot "
                             "become idle") from self._worker_error

    def _wait_for_event(self, seq: int, seconds: float) -> None:
        """Block until the queue's event log grows past `seq`: every change of a task's
        state appends one event, so the queue cannot become idle without one."""
        broker = self.broker
        with redis_errors("wait for the queue's next event"):
            broker.client.xread({broker.keys.events: f"{seq}-0"}, count=1,
                                block=max(1, round(seconds * 1000)))

    def _head(self) -> Cursor:
        """The cursor of the event log's last row: a report starts after it."""
        snapshot = take_snapshot(self.broker, limit=0)
        if snapshot.seq == 0:
            return Cursor(snapshot.epoch, 0, "")
        return Cursor(snapshot.epoch, snapshot.seq, str(snapshot.last_ts))

    def _report(self, last: int) -> RunReport:
        ended: dict[str, None] = {}
        for row in self._rows(last):
            self._cursor = row.cursor
            if row.fields.get("state") in ENDED:
                task_id = row.fields.get("task", "")
                ended.pop(task_id, None)  # ordered by its last end
                ended[task_id] = None
        results: dict[str, Any] = {}
        failed: dict[str, TaskFailed] = {}
        cancelled: list[str] = []
        upstream: dict[str, UpstreamFailed] = {}
        names: dict[str, str] = {}
        for task_id in ended:
            watched = self.broker.watch(task_id, mark=False)
            record = self.broker.task(task_id)
            if watched is None or record is None or not watched.ended:
                continue  # its record expired, or it went back to the queue since
            names[task_id] = record.name
            try:
                results[task_id] = outcome(task_id, watched)
            except UpstreamFailed as e:  # a TaskFailed, but the step never ran: cancelled
                upstream[task_id] = e
                cancelled.append(task_id)
            except TaskFailed as e:
                failed[task_id] = e
            except TaskCancelledError:
                cancelled.append(task_id)
            except NoResultError:
                results[task_id] = None
        return RunReport(results, failed, names, cancelled, upstream)

    def _rows(self, last: int) -> Iterator[Row]:
        """The event log's rows after the runner's cursor, up to sequence number `last`,
        read with the feed's own gap-checked step."""
        broker = self.broker
        k = broker.keys
        read = broker.client.register_script(source("read_events"))
        cursor = self._cursor
        while cursor.seq < last:
            with redis_errors("read the queue's event log"):
                reply = decode(read(keys=[k.events, k.seq, k.epoch],
                                    args=[cursor.epoch, cursor.seq, cursor.ts, READ_BATCH]))
            if isinstance(reply, Gap):
                raise TaskqError(
                    f"the event log of queue {broker.queue!r} no longer holds every event "
                    f"of this run ({reply.reason}): it keeps the last "
                    f"{self.settings.events_retention} events; give the TaskRunner "
                    "overrides={'events_retention': ...} large enough for a run")
            for row in reply.rows:
                if row.cursor.seq > last:
                    return
                yield row
                cursor = row.cursor
            if not reply.rows:
                return

    def _pending(self, timeout: float) -> str:
        """What keeps the queue busy, for the timeout's message."""
        snapshot: QueueSnapshot = take_snapshot(self.broker, limit=PENDING_SHOWN)
        c = snapshot.counts
        lines = [f"queue {self.broker.queue!r} was not idle after {timeout:g}s: {c.ready} "
                 f"ready, {c.leased} running, {c.delayed} delayed"]
        lines += [f"  running: {lease.name} {lease.task_id} (attempt {lease.attempt})"
                  for lease in snapshot.leased]
        for d in snapshot.delayed:
            due = (d.run_at - snapshot.now_ms) / 1000
            after = f", after {d.last_error}" if d.last_error else ""
            lines.append(f"  delayed: {d.name} {d.task_id} due in {due:.1f}s{after}")
        if c.delayed:
            lines.append("A delayed task keeps the queue busy until it has run: enqueue it "
                         "without a delay in the test, or wait longer.")
        return "\n".join(lines)


@contextmanager
def pointed_at(app: App, settings: Settings, broker: Broker) -> Iterator[App]:
    """`app` with `settings` and `broker` (one queue, even for a sharded app) for the
    block; its own are put back after. A sharded app still refuses what its shards
    would (workflows, an id and a key on two shards). `enqueue_async` in the block
    makes asyncio clients of its own (`await app.aclose()` in the block closes the
    running loop's)."""
    saved_settings, saved_layout, saved_sharded = app.settings, app.layout, app._sharded
    saved_rules = app.shard_rules
    saved_async = app._async  # the asyncio brokers `enqueue_async` made before, per loop
    saved_broker = app.use_broker(broker)
    app.settings, app.layout, app._sharded = settings, None, None
    app.shard_rules = saved_layout or saved_rules  # refused in one queue as across shards
    app._async = _LoopBroker()
    try:
        yield app
    finally:
        app.settings, app.layout, app._sharded = saved_settings, saved_layout, saved_sharded
        app.shard_rules = saved_rules
        app._async = saved_async
        app.use_broker(saved_broker)


__all__ = ["TEST_SETTINGS", "RunReport", "TaskRunner", "pointed_at"]
