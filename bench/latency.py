"""Pickup latency: an idle worker, one task at a time, from enqueue to the handler's start."""

from __future__ import annotations

import queue
import random
import statistics
import threading
import time
import uuid

from bench.drain import stats_field, worker_argv
from bench.harness import BenchError, Child, Options, Section, Server, Stat
from bench.tasks import STAMPS_KEY, make_app
from taskq import Settings

KINDS = {"bench.stamp_async": ("async", "`async def` handler"),
         "bench.stamp_sync": ("sync", "`def` handler")}
CONCURRENCY = 8
# Long enough for the worker to settle the last task and go back to waiting.
IDLE_SECONDS = (0.005, 0.015)
# A worker with slow pickups would take minutes; a run stops sending after this long.
RUN_BUDGET_SECONDS = 20.0


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def thread_wake_ms(samples: int = 200) -> float:
    """p50 in ms from putting an item on a queue to an idle thread blocked on it waking:
    the machine's price for every hand-off between threads or processes."""
    inbox: queue.SimpleQueue[float] = queue.SimpleQueue()
    delays: list[float] = []

    def receive() -> None:
        for _ in range(samples):
            sent = inbox.get()
            delays.append((time.perf_counter() - sent) * 1000)

    receiver = threading.Thread(target=receive)
    receiver.start()
    for _ in range(samples):
        time.sleep(random.uniform(*IDLE_SECONDS))
        inbox.put(time.perf_counter())
    receiver.join()
    return percentile(delays, 50)


def _one_run(server: Server, name: str, tasks: int) -> tuple[list[float], list[float]]:
    """Latencies in ms of `tasks` tasks sent one at a time to a fresh idle worker, and
    how long each `Task.enqueue` call itself took."""
    server.flush()
    queue = f"latency-{uuid.uuid4().hex[:8]}"
    app = make_app(queue, Settings.from_env({}, redis_url=server.url))
    task = app.tasks[name]
    worker = Child(worker_argv(queue, CONCURRENCY), server.env(), server.logs / f"{queue}.log")
    try:
        task.enqueue(tag="warm-up")
        if server.client.blpop([STAMPS_KEY], timeout=30) is None:
            raise BenchError(f"the worker did not start a task within 30s: {worker.tail()}")
        latencies: list[float] = []
        calls: list[float] = []
        budget = time.monotonic() + RUN_BUDGET_SECONDS
        for i in range(tasks):
            if time.monotonic() > budget:
                break
            time.sleep(random.uniform(*IDLE_SECONDS))
            sent = time.time()
            task.enqueue(tag=str(i))
            calls.append((time.time() - sent) * 1000)
            reply = server.client.blpop([STAMPS_KEY], timeout=10)
            if reply is None:
                raise BenchError(f"task {i} did not start within 10s (lost?)")
            tag, started = str(reply[1]).split()
            if tag != str(i):
                raise BenchError(f"expected task {i} to start, got {tag} (ran twice?)")
            latencies.append((float(started) - sent) * 1000)
        time.sleep(0.2)
        completed = stats_field(server, queue, "completed:completed")()
        if completed != len(latencies) + 1 or server.client.llen(STAMPS_KEY):
            raise BenchError(f"{completed} completions for {len(latencies) + 1} tasks")
        return latencies, calls
    finally:
        worker.stop()


def measure(server: Server, options: Options, known: dict[str, float]) -> Section:
    tasks = 50 if options.quick else 300
    section = Section(
        "latency", f"Pickup latency (idle worker, concurrency {CONCURRENCY}, {tasks} tasks "
        "one at a time per run)",
        ["handler", "p50 ms (median)", "p99 ms (median)", "mean ms", "max ms", "spread of p50",
         "tasks timed"])
    enqueue_calls: list[float] = []
    for name, (key, label) in KINDS.items():
        p50, p99, mean, worst, timed = Stat(), Stat(), Stat(), Stat(), Stat()
        try:
            for _ in range(options.repeats):
                values, calls = _one_run(server, name, tasks)
                enqueue_calls.extend(calls)
                p50.add(percentile(values, 50))
                p99.add(percentile(values, 99))
                mean.add(statistics.fmean(values))
                worst.add(max(values))
                timed.add(len(values))
        except BenchError as e:
            section.fail(label, e)
            continue
        section.rows.append([label, f"{p50.median:.2f}", f"{p99.median:.2f}",
                             f"{mean.median:.2f}", f"{worst.median:.2f}", p50.spread(),
                             f"{timed.median:.0f} of {tasks}"])
        section.figures[f"latency-p50-{key}"] = p50.median
        section.figures[f"latency-p99-{key}"] = p99.median
    if enqueue_calls:
        wake = thread_wake_ms()
        section.notes.append(
            f"Where the time goes (p50s measured in this run): the producer's own "
            f"`Task.enqueue` call takes {percentile(enqueue_calls, 50):.2f} ms (a round trip "
            f"to Redis from a process that was idle); an idle thread blocked on a queue wakes "
            f"{wake:.2f} ms after an item is put on it. A pickup needs Redis to wake the "
            "waiting worker (its wait and its lease are one round trip) and, after the lease, "
            "one more wake-up: the handler's thread, or the async handlers' event loop.")
    section.notes.append(
        "From just before the producer's `Task.enqueue` call to the handler's first line "
        "(`time.time()` on both sides, pushed back through Redis); the producer waits "
        f"{IDLE_SECONDS[0] * 1000:.0f}-{IDLE_SECONDS[1] * 1000:.0f} ms between tasks so the "
        "worker is idle each time. Each task is checked to start once, in order. A run "
        f"stops sending after {RUN_BUDGET_SECONDS:g} s (only slow pickups make it).")
    return section
