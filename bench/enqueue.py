"""Enqueue rate: one call per task (`Broker.enqueue`, `Task.enqueue`) and `enqueue_many`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from bench.harness import Options, Section, Server, Stat, rate
from bench.tasks import make_app
from taskq import App, NewTask, Settings

NOOP = "bench.noop_async"


def _app(server: Server, queue: str) -> App:
    return make_app(queue, Settings.from_env({}, redis_url=server.url))


def _one_by_one_broker(app: App, n: int) -> None:
    broker = app.broker
    for _ in range(n):
        broker.enqueue(uuid.uuid4().hex, name=NOOP)


def _one_by_one_task(app: App, n: int) -> None:
    task = app.tasks[NOOP]
    for _ in range(n):
        task.enqueue()


def _many(batch: int) -> Callable[[App, int], None]:
    def send(app: App, n: int) -> None:
        app.broker.enqueue_many([NewTask(uuid.uuid4().hex, name=NOOP) for _ in range(n)], batch)

    return send


def _timed(server: Server, send: Callable[[App, int], None], n: int, queue: str) -> float:
    """Tasks per second for one run on a fresh queue (the task objects of `enqueue_many`
    are built inside the timing: they are part of what a caller pays)."""
    server.flush()
    app = _app(server, queue)
    app.broker.counts()  # connect and load the scripts before the clock starts
    start = time.perf_counter()
    send(app, n)
    seconds = time.perf_counter() - start
    counts = app.broker.counts()
    if counts.ready != n:
        raise RuntimeError(f"{counts.ready} tasks ready after enqueueing {n}")
    return n / seconds


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    single = options.scaled(1 / 8)
    variants: list[tuple[str, str, Callable[[App, int], None], int]] = [
        ("enqueue-broker", "`Broker.enqueue`, one call per task", _one_by_one_broker, single),
        ("enqueue-task", "`Task.enqueue`, one call per task", _one_by_one_task, single),
        ("enqueue-many-100", "`enqueue_many`, batches of 100", _many(100), options.n),
        ("enqueue-many", "`enqueue_many`, batches of 1000 (default)", _many(1000), options.n),
    ]
    section = Section("enqueue", "Enqueue rate (one producer, one connection)",
                      ["how", "tasks", "tasks/s (median)", "spread"])
    for key, label, send, n in variants:
        stat = Stat()
        try:
            for repeat in range(options.repeats):
                stat.add(_timed(server, send, n, f"enq-{key}-{repeat}"))
        except Exception as e:
            section.fail(label, e)
            continue
        section.rows.append([label, f"{n:,}", rate(stat.median), stat.spread()])
        section.figures[key] = stat.median
    section.notes.append("Each run starts on an empty server; the tasks are the async no-op "
                         "with no arguments, and the count in `ready` is checked afterwards.")
    return section
