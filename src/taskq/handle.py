"""A producer's handle on an enqueued task: how it stands, and its result once it ends."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, get_args

from taskq.boundary import unavailable_for_now
from taskq.codec import decode_result
from taskq.context import running_task
from taskq.errors import (
    BrokerError,
    NoResultError,
    ResultTimeoutError,
    TaskCancelledError,
    TaskFailed,
    TaskNotFoundError,
    TaskqError,
    UpstreamFailed,
)
from taskq.limits import RESULT_TIMEOUT, Seconds, shown
from taskq.outages import OUTAGE_PAUSE_SECONDS
from taskq.results import Cancellation, Enqueued, TaskRecord, TaskState, Watched

if TYPE_CHECKING:
    # A handle's result type is Any when unsaid (a bare `TaskHandle` annotation, a
    # handle made from an id): a default needs typing_extensions before Python 3.13,
    # which type checkers have and taskq need not import.
    from typing_extensions import TypeVar

    from taskq.aio import AsyncBroker
    from taskq.broker import Broker
    from taskq.context import TaskContext

    T = TypeVar("T", default=Any)
else:
    from typing import TypeVar

    T = TypeVar("T")

R = TypeVar("R")
P = ParamSpec("P")

# The longest one blocking wait lasts before the record is read again: a record deleted
# while waited for (purged, expired, flushed) wakes no one, and the read says so.
WAIT_SLICE_SECONDS = 1.0


@dataclass(frozen=True, eq=False)
class TaskHandle(Enqueued, Generic[T]):
    """An enqueued task, as its producer sees it: `status()`, and `result()` waiting for
    its end. It is the `Enqueued` of the call (`task_id`, `created`), so code that reads
    those keeps working; `App.handle(task_id)` makes one for any task id later.

    A handle from `Broker` answers both `result()` and `await result_async()` (the
    latter on a thread); a handle from `AsyncBroker` (`Task.enqueue_async`,
    `App.handle_async`) answers only the `_async` methods, with its asyncio client."""

    broker: Broker | None = field(default=None, repr=False, kw_only=True)
    async_broker: AsyncBroker | None = field(default=None, repr=False, kw_only=True)

    def __eq__(self, other: object) -> bool:
        # Equal to the plain Enqueued of the same call, as the value it stays.
        if not isinstance(other, Enqueued):
            return NotImplemented
        return (self.task_id, self.created) == (other.task_id, other.created)

    def __hash__(self) -> int:
        return hash((self.task_id, self.created))

    def record(self) -> TaskRecord | None:
        """The task's whole stored record, or None if it has none."""
        return self._blocking("record").task(self.task_id)

    def status(self) -> str:
        """pending, delayed, running, completed, dead or cancelled (or waiting, a
        workflow step whose stage has not started); "unknown" when there is no record
        (it never existed, or it ended and its record expired) or its record holds a
        state taskq never writes."""
        return state_of(self._blocking("status").watch(self.task_id, mark=False))

    def result(self, timeout: Seconds | None = None) -> T:
        """The task's return value once it has completed, waiting up to `timeout` seconds
        (None: as long as it takes). The wait is woken through Redis by the script that
        ends the task, not by polling.

        Raises `TaskFailed` (type, message and traceback from the worker) when the task
        is dead, `TaskCancelledError` when it was cancelled, `NoResultError` when it
        completed without keeping one, `TaskNotFoundError` when it has no record, and
        `ResultTimeoutError` when the timeout passes first. Of a task that ran more than
        once, the result is the one of the run whose ack Redis accepted: an ack with a
        stale token keeps nothing."""
        return self._result(ResultWait(self.task_id, self._blocking("result").queue, timeout))

    def _result(self, wait: ResultWait) -> T:
        broker = self._blocking("result")
        while True:
            watched = wait.retried(broker.watch, self.task_id)
            if watched is not None and watched.ended:
                value: T = outcome(self.task_id, watched)  # the handler's, as JSON kept it
                return value
            try:
                block = wait.next_block(watched)
            except ResultTimeoutError as e:
                if not pending_unserved(watched, broker.has_workers):
                    raise
                raise ResultTimeoutError(f"{e}{unserved(wait.queue)}") from None
            wait.waited_out(broker.wait_done, self.task_id, block)

    def cancel(self) -> Cancellation:
        """Cancel the task: pending, delayed or dead, it ends cancelled now (`outcome`
        "cancelled"); running, its worker is told at its next heartbeat, refuses its
        effects from then on and ends it cancelled when the handler returns ("requested";
        an `async def` handler gets `asyncio.CancelledError` at its next await). A task
        that has ended is left as it is ("unchanged"); "unknown" when it has no record."""
        return self._blocking("cancel").cancel(self.task_id)

    async def cancel_async(self) -> Cancellation:
        """`cancel()` for coroutines."""
        broker = self.async_broker
        if broker is None:
            return await asyncio.to_thread(self.cancel)
        return await broker.cancel(self.task_id)

    async def record_async(self) -> TaskRecord | None:
        """`record()` for coroutines."""
        broker = self.async_broker
        if broker is None:
            return await asyncio.to_thread(self.record)
        return await broker.task(self.task_id)

    async def status_async(self) -> str:
        """`status()` for coroutines."""
        broker = self.async_broker
        if broker is None:
            return await asyncio.to_thread(self.status)
        return state_of(await broker.watch(self.task_id, mark=False))

    async def result_async(self, timeout: Seconds | None = None) -> T:
        """`result()` for coroutines, raising the same errors: the event loop runs other
        coroutines while Redis holds the wait. A handle from `Broker` waits on a thread,
        its timeout counted from this call however long a thread takes to come free."""
        broker = self.async_broker
        if broker is None:
            blocking = self._blocking("result")
            wait = ResultWait(self.task_id, blocking.queue, timeout)
            return await wait.on_thread(self._result)
        wait = ResultWait(self.task_id, broker.queue, timeout)
        since = cancels()
        async with wait.bounded():
            while True:
                watched = await wait.retried_async(broker.watch, self.task_id)
                cancel_requested(since)
                if watched is not None and watched.ended:
                    value: T = outcome(self.task_id, watched)
                    return value
                try:
                    block = wait.next_block(watched)
                except ResultTimeoutError as e:
                    if watched is None or watched.state != "pending":
                        raise
                    try:
                        served = await broker.has_workers()
                    except TaskqError:
                        raise e from None
                    if served:
                        raise
                    raise ResultTimeoutError(f"{e}{unserved(wait.queue)}") from None
                await wait.waited_out_async(broker.wait_done, self.task_id, block)
                cancel_requested(since)

    def _blocking(self, method: str) -> Broker:
        if self.broker is None:
            raise TaskqError(
                f"this handle on task {self.task_id} came from an AsyncBroker, which does "
                f"not block: use `await handle.{method}_async()`"
                if self.async_broker is not None else
                f"this handle on task {self.task_id} has no broker to ask")
        return self.broker


# How long past a result wait's timeout a Redis call under way may take (see bounded).
CALL_SLACK_SECONDS = 0.5


class ResultWait:
    """When a wait for one task's result ends, and how long it blocks in between: what
    `result()` and `result_async()` share, apart from how they block."""

    __slots__ = ("abandoned", "deadline", "inside", "outages", "queue", "task_id", "timeout",
                 "what")

    def __init__(self, task_id: str, queue: str, timeout: Seconds | None,
                 what: str = "") -> None:
        if timeout is not None:
            timeout = RESULT_TIMEOUT.check(timeout)
        self.task_id, self.queue, self.timeout = task_id, queue, timeout
        # What the timeout's message says has not ended (default: the task).
        self.what = what or f"task {task_id}"
        self.deadline = None if timeout is None else time.monotonic() + timeout
        # What a timeout adds when a handler waits: the trap it may have fallen in.
        self.inside = in_handler(running_task())
        self.outages = 0  # the calls Redis could not answer so far
        # Set when the coroutine that awaits this wait on a thread is cancelled.
        self.abandoned = False

    async def on_thread(self, wait: Callable[[ResultWait], R]) -> R:
        """`wait(self)`, a blocking wait, run on a thread of the event loop's default
        executor. Cancelled, the coroutine tells the thread to end its wait at its next
        look (within a slice): else the thread would hold its connection blocked in
        Redis until the task ended, and a few such waits fill the executor that every
        `asyncio.to_thread` of the program shares."""
        try:
            return await asyncio.to_thread(wait, self)
        except asyncio.CancelledError:
            self.abandoned = True
            raise

    def _look(self) -> None:
        """End a wait whose awaiting coroutine was cancelled (see on_thread)."""
        if self.abandoned:
            raise asyncio.CancelledError(f"the wait for {self.what} was cancelled")

    def retried(self, call: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call(*args, **kwargs)`, made again after each pause `after_outage` sets while
        Redis cannot answer for a while."""
        while True:
            self._look()
            try:
                return call(*args, **kwargs)
            except BrokerError as e:
                time.sleep(self.after_outage(e))

    async def retried_async(self, call: Callable[P, Awaitable[R]], *args: P.args,
                            **kwargs: P.kwargs) -> R:
        """`retried`, awaited."""
        while True:
            try:
                return await call(*args, **kwargs)
            except BrokerError as e:
                await asyncio.sleep(self.after_outage(e))

    def waited_out(self, wait: Callable[P, object], *args: P.args, **kwargs: P.kwargs) -> None:
        """`wait(*args, **kwargs)`, a blocking wait for an end; after an error
        `after_outage` lets pass, its pause instead, for the caller to read again."""
        try:
            wait(*args, **kwargs)
        except BrokerError as e:
            time.sleep(self.after_outage(e))

    async def waited_out_async(self, wait: Callable[P, Awaitable[object]], *args: P.args,
                               **kwargs: P.kwargs) -> None:
        """`waited_out`, awaited."""
        try:
            await wait(*args, **kwargs)
        except BrokerError as e:
            await asyncio.sleep(self.after_outage(e))

    def after_outage(self, error: BrokerError) -> float:
        """Seconds to pause before asking Redis again, after `error`: a wait rides out
        a Redis that cannot answer for a while (restarting, loading, busy), as the task
        waited for does, until its timeout. `error` itself when it is no such outage;
        ResultTimeoutError, naming it, once the timeout has passed."""
        if not unavailable_for_now(error):
            raise error
        first, longest = OUTAGE_PAUSE_SECONDS
        pause: float = min(longest, first * 2 ** min(self.outages, 10))
        self.outages += 1
        if self.deadline is None:
            return pause
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ResultTimeoutError(f"{self.what} has not ended within {self.timeout:g}s: "
                                     f"Redis could not answer ({error})") from error
        return min(pause, left)

    @contextlib.asynccontextmanager
    async def bounded(self) -> AsyncIterator[None]:
        """Cut the awaits inside short soon after the timeout passes, with
        ResultTimeoutError: a Redis that answers slowly (each call may take the client's
        retries) cannot hold the wait past it. A call under way at the deadline gets
        CALL_SLACK_SECONDS more, so on a Redis that answers the timeout's message
        still says what state the task is in."""
        if self.deadline is None:
            yield
            return
        bound = asyncio.timeout(max(0.0, self.deadline - time.monotonic()) + CALL_SLACK_SECONDS)
        try:
            async with bound:
                yield
        except TimeoutError:
            if not bound.expired():  # the wait's own ResultTimeoutError, or Redis's
                raise
            raise ResultTimeoutError(f"{self.what} has not ended within {self.timeout:g}s: "
                                     "Redis did not answer in time") from None

    def next_block(self, watched: Watched | None, subject: str = "it") -> float:
        """Seconds to block on the task's done list before reading it again, having
        read it (marked) as `watched`, not ended: the time left, at most one slice
        (`subject` names what was read, in the timeout's message).
        Raises `TaskNotFoundError` when it has no record, `ResultTimeoutError` once the
        timeout has passed."""
        self._look()
        if watched is None:
            raise TaskNotFoundError(missing(self.task_id, self.queue))
        if self.deadline is None:
            return WAIT_SLICE_SECONDS
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise ResultTimeoutError(f"{self.what} has not ended within "
                                     f"{self.timeout:g}s: {subject} is {watched.state}"
                                     f"{self.inside if watched.state != 'running' else ''}")
        return min(left, WAIT_SLICE_SECONDS)


# What `status()` may report besides "unknown".
STATES = frozenset((*get_args(TaskState), "waiting"))


def cancels() -> int:
    """How many cancels the running task has been asked and not withdrawn
    (`cancelling()`; 0 outside a task): what `cancel_requested` counts from."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def cancel_requested(since: int) -> None:
    """Raise CancelledError if the running task was asked to cancel since it had `since`
    cancels (`cancels()` as its wait began). On Python 3.11, redis-py's asyncio.wait_for
    around a socket write drops a cancel that lands as the write completes, though the
    task still counts it (`taskq.transport.keeping` keeps it on a single node's client,
    not on a cluster's, whose connections are redis-py's own): a loop of awaits that
    checks ends when its caller asked, not at its own timeout, or never. A cancel asked
    before the wait began, caught by the caller and never withdrawn (`uncancel()`), is
    no cancel of this wait."""
    if cancels() > since:
        raise asyncio.CancelledError


def pending_unserved(watched: Watched | None, has_workers: Callable[[], bool]) -> bool:
    """Whether a task not ended in time is still pending on a queue no worker serves
    (False when Redis cannot say: the timeout is the error to raise)."""
    if watched is None or watched.state != "pending":
        return False
    try:
        return not has_workers()
    except TaskqError:
        return False


def in_handler(context: TaskContext | None) -> str:
    """What a timeout adds when a task's handler waited: a handler that waits for
    another task holds its worker's slot meanwhile, so tasks that wait for tasks can
    hold every slot while what they wait for stays pending."""
    if context is None:
        return ""
    return (f"; it was waited for inside the handler of task {context.task_id} "
            f"({context.name}), which holds a slot of its worker while it waits: handlers "
            "that wait for other tasks can hold every slot and wait for good. Run the "
            "steps as a workflow (taskq.chain) instead of waiting in a handler")


def unserved(queue: str) -> str:
    """What a timeout adds when no worker serves the task's queue: a producer and its
    workers that disagree on TASKQ_QUEUE or REDIS_URL leave tasks pending for good."""
    return (f", and no worker is registered on queue {queue!r}: are its workers started "
            "with the same TASKQ_QUEUE and REDIS_URL as this producer?")


def state_of(watched: Watched | None) -> str:
    """The state a handle's `status()` reports for what watch read."""
    return "unknown" if watched is None or watched.state not in STATES else watched.state


def outcome(task_id: str, watched: Watched) -> Any:
    """The result of a task that has ended, or the error that says why there is none."""
    if watched.state == "cancelled" and watched.upstream:
        raise UpstreamFailed(task_id, watched.upstream, watched.error_type,
                             watched.error_message)
    if watched.state == "cancelled":
        raise TaskCancelledError(task_id)
    if watched.state == "dead":
        # A failure the worker described has its own message, empty or not; one it did
        # not (a lease that ran out, a record written by hand) has last_error alone.
        raise TaskFailed(task_id, watched.error_type or "Error",
                         watched.error_message if watched.error_type else watched.last_error,
                         watched.traceback, watched.retries + 1)
    if watched.result is None:
        raise NoResultError(
            f"task {task_id} completed without keeping a result: its task was registered "
            "with store_result=False, or its worker acked it at shutdown after its effect "
            "and cut off the rest of its handler")
    return decode_result(watched.result)


def missing(task_id: str, queue: str) -> str:
    return (f"no task {shown(task_id)} on queue {queue!r}: it never existed there, or it "
            "ended and its record expired (completed records are kept "
            "TASKQ_COMPLETED_TTL_SECONDS, or the task's result_ttl)")
