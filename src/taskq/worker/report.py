"""What a worker says when asked what it is doing (SIGUSR1: lifecycle.REPORT_SIGNAL).

As the signal comes, faulthandler dumps every thread's stack on stderr, from C, so a
worker whose loop is stuck still shows where. This is the rest, logged by the loop
(the owner of the tasks in hand, whose lock a signal handler could find held): each
task in hand, how long its handler has run, on which thread and where that thread is
now, the thread named as the dump names it, so a stuck handler can be told from a slow
one and matched with its whole stack."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import FrameType

from taskq.context import TaskContext
from taskq.worker.slots import Stats

log = logging.getLogger("taskq.worker")


def thread_label(ident: int, names: dict[int, str]) -> str:
    """The thread `ident` by name and as faulthandler's dump names it (`Thread 0x…`,
    16 hex digits on a 64-bit machine)."""
    return f"{names.get(ident, 'a thread')} (0x{ident:016x})"


def where(frame: FrameType | None) -> str:
    """The line `frame` runs: 'file:line in function'."""
    if frame is None:
        return "an unknown place"
    code = frame.f_code
    return f"{code.co_filename}:{frame.f_lineno} in {code.co_name}"


def report(worker_id: str, in_hand: list[TaskContext], stats: Stats, draining: bool,
           coroutines_on: int | None = None, stacks_dumped: bool = False) -> None:
    """Log what the worker is doing: one line for the worker, one a task in hand, the
    longest-running first (each line's facts also as record attributes, for
    `--log-format json`). `coroutines_on`: the thread the async handlers share, whose
    line now tells nothing of any one of them; `stacks_dumped`: whether faulthandler
    has just written every thread's stack to stderr."""
    now = time.monotonic()
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate() if t.ident is not None}
    running = sorted((c for c in in_hand if c.started_at), key=lambda c: c.started_at)
    waiting = [c for c in in_hand if not c.started_at]
    log.info("worker %s%s: %d tasks in hand, %d running and %d waiting for a handler; "
             "so far %s%s", worker_id, " (draining)" if draining else "", len(in_hand),
             len(running), len(waiting), stats,
             " (every thread's stack is on stderr above)" if stacks_dumped else "",
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
