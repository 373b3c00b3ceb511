"""What a worker logs when asked what it is doing (taskq.worker.report)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from threading import Thread

import pytest

from taskq.context import TaskContext
from taskq.worker.report import log_stacks, report, thread_label
from taskq.worker.slots import Stats


def context(task_id: str, attempt: int = 1) -> TaskContext:
    return TaskContext(task_id=task_id, name="billing.charge", queue="q", worker_id="w",
                       token=1, attempt=attempt, max_retries=3)


def test_each_task_in_hand_is_one_line_the_longest_running_first_then_those_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    older, newer, waiting = context("older", attempt=2), context("newer"), context("waiting")
    older.begin()
    newer.begin()
    older.started_at -= 5  # began five seconds before the other
    with caplog.at_level(logging.INFO, "taskq.worker"):
        report("w1", [newer, waiting, older], Stats(leased=3), draining=True)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("worker w1 (draining): 3 tasks in hand, 2 running and 1 "
                               "waiting for a handler; so far Stats(leased=3")
    assert lines[1].startswith("  billing.charge older attempt 2: running for 5.")
    assert lines[2].startswith("  billing.charge newer attempt 1: running for 0.")
    assert lines[3] == "  billing.charge waiting attempt 1: waiting for a handler"
    assert [getattr(r, "task_id", None) for r in caplog.records] == \
        [None, "older", "newer", "waiting"]


@contextmanager
def a_thread(name: str, first: Callable[[], object] = lambda: None) -> Iterator[Thread]:
    """A thread named `name` that calls `first` and then waits in `handler` until the
    block ends."""
    started, done = threading.Event(), threading.Event()

    def handler() -> None:
        first()
        started.set()
        while not done.is_set():
            time.sleep(0.01)

    thread = threading.Thread(target=handler, name=name)
    thread.start()
    try:
        started.wait(5)
        yield thread
    finally:
        done.set()
        thread.join(5)


def test_a_running_task_names_its_thread_and_the_line_it_is_at(
    caplog: pytest.LogCaptureFixture,
) -> None:
    running = context("t1")
    with a_thread("taskq-handler-7", running.begin) as thread, \
            caplog.at_level(logging.INFO, "taskq.worker"):
        report("w1", [running], Stats(), draining=False)
    line = caplog.records[1].getMessage()
    assert f"on taskq-handler-7 (0x{thread.ident:016x}), at {__file__}:" in line
    assert line.endswith(" in handler")


def test_a_thread_that_has_ended_is_named_by_its_number_alone() -> None:
    assert thread_label(0x7F00, {}) == "a thread (0x0000000000007f00)"


def test_an_async_handler_is_said_to_run_as_a_coroutine_on_the_loops_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    running = context("t1")
    running.begin()
    with caplog.at_level(logging.INFO, "taskq.worker"):
        report("w1", [running], Stats(), draining=False,
               coroutines_on=threading.get_ident())
    assert caplog.records[1].getMessage().endswith(
        f"on MainThread (0x{threading.get_ident():016x}), as a coroutine")


def test_each_threads_stack_is_one_line_innermost_frame_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with a_thread("taskq-handler-3") as thread, \
            caplog.at_level(logging.INFO, "taskq.worker"):
        log_stacks()
    line = next(r.getMessage() for r in caplog.records
                if r.getMessage().startswith("thread taskq-handler-3 "))
    assert line.startswith(f"thread taskq-handler-3 (0x{thread.ident:016x}): {__file__}:")
    frames = line.split(": ", 1)[1].split(" <- ")
    assert frames[0].endswith(" in handler") and frames[-1].endswith(" in _bootstrap")
