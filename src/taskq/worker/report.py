"""What a worker says when asked what it is doing (SIGUSR1: lifecycle.REPORT_SIGNAL).

Two parts, on two threads. Every thread's stack is logged by the stack reporter, a
thread of its own woken by the signal's handler, so a worker whose loop is stuck (or
one still importing its app) still shows where each thread is. Each task in hand is
logged by the loop, the owner of the tasks in hand (whose lock a signal handler could
find held): how long its handler has run, on which thread and where that thread is
now, so a stuck handler can be told from a slow one. Both go through the log, so
`--log-format json` holds for them."""

from __future__ import annotations

import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

from taskq.context import TaskContext
from taskq.worker.slots import Stats

log = logging.getLogger("taskq.worker")


def thread_label(ident: int, names: dict[int, str]) -> str:
    """The thread `ident` by name and number."""
    return f"{names.get(ident, 'a thread')} (0x{ident:016x})"


def where(frame: FrameType | None) -> str:
    """The line `frame` runs: 'file:line in function'."""
    if frame is None:
        return "an unknown place"
    code = frame.f_code
    return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"


def thread_names() -> dict[int, str]:
    return {t.ident: t.name for t in threading.enumerate() if t.ident is not None}


def outward(frame: FrameType | None) -> Iterator[FrameType]:
    """`frame` and those that called it, innermost first."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def log_stacks() -> None:
    """One line a thread: its name and its stack, innermost frame first."""
    names = thread_names()
    for ident, frame in sorted(sys._current_frames().items()):
        stack = " <- ".join(where(f) for f in outward(frame))
        log.info("thread %s: %s", thread_label(ident, names), stack,
                 extra={"thread_name": names.get(ident, ""), "stack": stack})


class StackReporter:
    """The thread that logs every thread's stack each time it is asked. `start` it (in
    a normal context: starting a thread takes locks a signal handler could find held);
    `ask` only puts on a SimpleQueue, which is safe in a signal handler."""

    def __init__(self) -> None:
        self._asks: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._pid = 0  # the process its thread runs in (a forked one has none)

    def start(self) -> None:
        """Start the thread, unless it runs in this process already."""
        if self._pid != os.getpid():
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="taskq-stacks", daemon=True).start()

    def ask(self) -> None:
        self._asks.put(None)

    def _run(self) -> None:
        while True:
            self._asks.get()
            try:
                log_stacks()
            except Exception:  # a report must never end the thread that makes them
                log.exception("could not log the threads' stacks")


# The process's one stack reporter, for the start-up's handler and the worker's alike.
STACKS = StackReporter()


def report(worker_id: str, in_hand: list[TaskContext], stats: Stats, draining: bool,
           coroutines_on: int | None = None) -> None:
    """Log what the worker is doing: one line for the worker, one a task in hand, the
    longest-running first (each line's facts also as record attributes, for
    `--log-format json`). `coroutines_on`: the thread the async handlers share, whose
    line now tells nothing of any one of them."""
    now = time.monotonic()
    frames = sys._current_frames()
    names = thread_names()
    running = sorted((c for c in in_hand if c.started_at), key=lambda c: c.started_at)
    waiting = [c for c in in_hand if not c.started_at]
    log.info("worker %s%s: %d tasks in hand, %d running and %d waiting for a handler; "
             "so far %s", worker_id, " (draining)" if draining else "", len(in_hand),
             len(running), len(waiting), stats,
             extra={"in_hand": len(in_hand), "running": len(running)})
    for context in running:
        ran = now - context.started_at
        at = "as a coroutine" if context.thread == coroutines_on \
            else f"at {where(frames.get(context.thread))}"
        log.info("  %s %s attempt %d: running for %.1fs on %s, %s", context.name,
                 context.task_id, context.attempt, ran,
                 thread_label(context.thread, names), at,
                 extra={"task_id": context.task_id, "task": context.name,
                        "queue": context.queue, "attempt": context.attempt,
                        "running_ms": round(ran * 1000, 1)})
    for context in waiting:
        log.info("  %s %s attempt %d: waiting for a handler", context.name,
                 context.task_id, context.attempt,
                 extra={"task_id": context.task_id, "task": context.name,
                        "queue": context.queue, "attempt": context.attempt})
