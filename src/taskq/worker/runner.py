"""Runs handlers where the worker can watch them: sync ones on threads, async ones on a loop."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from taskq.app import App, Task
from taskq.codec import decode_payload, encode_result
from taskq.context import TaskContext, bind, unbind
from taskq.errors import PayloadError, ResultError, UnknownTaskError
from taskq.results import Failure, LeasedTask
from taskq.worker.inbox import Inbox, Outcome

log = logging.getLogger("taskq.worker")

MAX_SUMMARY_CHARS = 2000


# A handler call, and whether its return value is kept.
Call = tuple[Callable[..., Any], list[Any], dict[str, Any], bool]
# A prepared run: the handler call, the task it runs, and the context it runs in.
Job = tuple[Call, LeasedTask, TaskContext]


def type_name(error: BaseException) -> str:
    """`module.Name` of the exception's class; builtins by their bare name."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else \
        f"{cls.__module__}.{cls.__qualname__}"


def describe(error: BaseException) -> Failure:
    """The exception as a `Failure`: its type, message and whole formatted traceback
    (chained causes included), with a one-line summary naming where it was raised."""
    summary = f"{type(error).__name__}: {error}"
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        summary += f" (at {last.filename}:{last.lineno} in {last.name})"
    return Failure(type_name(error), str(error), "".join(traceback.format_exception(error)),
                   summary[:MAX_SUMMARY_CHARS])


def arguments(payload: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Call arguments from a payload: `{"args": [...], "kwargs": {...}}` as made by
    `Task.enqueue`, or any other object as keyword arguments (the seed's producer)."""
    if payload and set(payload) <= {"args", "kwargs"}:
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise PayloadError("payload 'args' must be a list and 'kwargs' an object")
        return args, kwargs
    return [], dict(payload)


class Runner:
    """Executes leased tasks and puts each `Outcome` in the loop's inbox; never raises."""

    def __init__(self, app: App, concurrency: int, inbox: Inbox) -> None:
        self.app = app
        self.inbox = inbox
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._thread_main, name=f"taskq-handler-{i}", daemon=True)
            for i in range(concurrency)
        ]
        self._loop = asyncio.new_event_loop()
        self._running: set[asyncio.Task[None]] = set()
        self._loop_thread = threading.Thread(
            target=self._loop_main, name="taskq-async-handlers", daemon=True
        )
        # Set when a handler thread takes a job or the loop starts a coroutine, so that
        # a thread that handed work over can step aside until a handler has it.
        self._taken = threading.Event()

    def start(self) -> None:
        for thread in self._threads:
            thread.start()
        self._loop_thread.start()

    def _loop_main(self) -> None:
        try:
            self._loop.run_forever()
        finally:
            # An unclosed loop leaks its self-pipe; close it once `close` has stopped it.
            self._loop.close()

    def submit(self, batch: Sequence[tuple[LeasedTask, TaskContext]]) -> bool:
        """Start a leased batch: sync handlers go to the threads one by one; async ones
        reach the loop in one hand-off, so its thread wakes once per batch, not per task.
        Returns whether any task went to a handler (the others are reported failed)."""
        self._taken.clear()
        coroutines: list[Job] = []
        handed_over = False
        for task, context in batch:
            try:
                registered, call = self._prepare(task)
            except (UnknownTaskError, PayloadError) as e:
                self.inbox.put(Outcome(task, context, Failure(
                    type_name(e), str(e), summary=f"{type(e).__name__}: {e}"[:MAX_SUMMARY_CHARS])))
                continue
            if registered.is_async:
                coroutines.append((call, task, context))
            else:
                self._jobs.put((call, task, context))
                handed_over = True
        if coroutines:
            self._loop.call_soon_threadsafe(self._start_coroutines, coroutines)
        return handed_over or bool(coroutines)

    def wait_taken(self, timeout: float) -> bool:
        """Block until the batch last submitted has been taken up (a handler thread took
        a job, or the loop started a coroutine), at most `timeout` seconds.

        The caller steps aside while it does: a thread that hands over work and goes on
        running Python holds the GIL the woken handler needs to start, and an idle
        worker's next task would wait for it."""
        return self._taken.wait(timeout)

    def _mark_taken(self) -> None:
        if not self._taken.is_set():  # set() takes the Event's lock: not once per task
            self._taken.set()

    def _prepare(self, task: LeasedTask) -> tuple[Task[Any, Any], Call]:
        registered = self.app.tasks.get(task.name)
        if registered is None:
            known = ", ".join(sorted(self.app.tasks)) or "none"
            raise UnknownTaskError(
                f"unknown task {task.name!r}: no function with that name is registered "
                f"in this worker (known: {known})"
            )
        args, kwargs = arguments(decode_payload(task.payload))
        return registered, (registered.fn, args, kwargs, registered.store_result)

    def _start_coroutines(self, jobs: list[Job]) -> None:
        for call, task, context in jobs:
            # The loop keeps only a weak reference to a task: hold it until it ends
            # (`_run_async` lets go of it last thing, sparing a done-callback per task;
            # nothing cancels these tasks before they start, which would skip that).
            self._running.add(self._loop.create_task(self._run_async(call, task, context)))

    async def _run_async(self, call: Call, task: LeasedTask, context: TaskContext) -> None:
        fn, args, kwargs, keep = call
        self._mark_taken()
        token = bind(context)
        try:
            outcome = self._returned(task, context, await fn(*args, **kwargs), keep)
        except (Exception, SystemExit, asyncio.CancelledError) as e:
            outcome = Outcome(task, context, describe(e))
        finally:
            unbind(token)
            self._running.discard(asyncio.current_task())
        self.inbox.put(outcome)

    def _thread_main(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._mark_taken()
            (fn, args, kwargs, keep), task, context = job
            token = bind(context)
            try:
                outcome = self._returned(task, context, fn(*args, **kwargs), keep)
            except (Exception, SystemExit) as e:
                outcome = Outcome(task, context, describe(e))
            finally:
                unbind(token)
            self.inbox.put(outcome)

    def _returned(self, task: LeasedTask, context: TaskContext, value: Any,
                  keep: bool) -> Outcome:
        """The outcome of a handler that returned `value`: encoded on the handler's own
        thread, so the loop thread only sends it. A value that cannot be kept fails the
        attempt, saying why (retried like any failure: the handler must change)."""
        if not keep:
            return Outcome(task, context, None)
        try:
            return Outcome(task, context, None,
                           encode_result(value, self.app.settings.max_result_bytes))
        except ResultError as e:
            return Outcome(task, context, Failure(
                "taskq.ResultError", str(e), summary=f"ResultError: {e}"[:MAX_SUMMARY_CHARS]))

    def close(self) -> None:
        """Stop taking jobs. Handlers still running are daemon threads: they end with the
        process, and their effects are already fenced off by `TaskContext.abandon`."""
        for _ in self._threads:
            self._jobs.put(None)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def join(self, timeout: float) -> list[str]:
        """After `close`, wait up to `timeout` seconds in all for the handler threads and
        the loop's thread to end; returns the names of those still running (a handler
        that has not returned)."""
        threads = [t for t in (*self._threads, self._loop_thread) if t.ident is not None]
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [t.name for t in threads if t.is_alive()]
