"""A producer's handle on an enqueued task: how it stands, and its result once it ends."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from taskq.codec import decode_result
from taskq.errors import NoResultError, ResultTimeoutError, TaskFailed, TaskNotFoundError
from taskq.limits import TIMEOUT, shown
from taskq.results import Enqueued, TaskRecord, Watched

if TYPE_CHECKING:
    from taskq.broker import Broker

# The longest one blocking wait lasts before the record is read again: a record deleted
# while waited for (purged, expired, flushed) wakes no one, and the read says so.
WAIT_SLICE_SECONDS = 1.0


@dataclass(frozen=True, eq=False)
class TaskHandle(Enqueued):
    """An enqueued task, as its producer sees it: `status()`, and `result()` waiting for
    its end. It is the `Enqueued` of the call (`task_id`, `created`), so code that reads
    those keeps working; `App.handle(task_id)` makes one for any task id later."""

    broker: Broker = field(repr=False, kw_only=True)

    def __eq__(self, other: object) -> bool:
        # Equal to the plain Enqueued of the same call, as the value it stays.
        if not isinstance(other, Enqueued):
            return NotImplemented
        return (self.task_id, self.created) == (other.task_id, other.created)

    def __hash__(self) -> int:
        return hash((self.task_id, self.created))

    def record(self) -> TaskRecord | None:
        """The task's whole stored record, or None if it has none."""
        return self.broker.task(self.task_id)

    def status(self) -> str:
        """pending, delayed, running, completed or dead; "unknown" when there is no
        record (it never existed, or it ended and its record expired)."""
        watched = self.broker.watch(self.task_id, mark=False)
        return "unknown" if watched is None else watched.state

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value once it has completed, waiting up to `timeout` seconds
        (None: as long as it takes). The wait is woken through Redis by the script that
        ends the task, not by polling.

        Raises `TaskFailed` (type, message and traceback from the worker) when the task
        is dead, `NoResultError` when it completed without keeping one,
        `TaskNotFoundError` when it has no record, and `ResultTimeoutError` when the
        timeout passes first. Of a task that ran more than once, the result is the one
        of the run whose ack Redis accepted: an ack with a stale token keeps nothing."""
        if timeout is not None:
            TIMEOUT.check(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            watched = self.broker.watch(self.task_id)
            if watched is None:
                raise TaskNotFoundError(self._missing())
            if watched.ended:
                return self._outcome(watched)
            left = WAIT_SLICE_SECONDS if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise ResultTimeoutError(
                    f"task {self.task_id} has not ended within {timeout:g}s: it is "
                    f"{watched.state}")
            self.broker.wait_done(self.task_id, min(left, WAIT_SLICE_SECONDS))

    async def result_async(self, timeout: float | None = None) -> Any:
        """`result()` for coroutines: the wait runs on a thread, never on the event loop."""
        return await asyncio.to_thread(self.result, timeout)

    def _outcome(self, watched: Watched) -> Any:
        return outcome(self.task_id, watched)

    def _missing(self) -> str:
        return missing(self.task_id, self.broker.queue)


def outcome(task_id: str, watched: Watched) -> Any:
    """The result of a task that has ended, or the error that says why there is none."""
    if watched.state == "dead":
        raise TaskFailed(task_id, watched.error_type or "Error",
                         watched.error_message or watched.last_error, watched.traceback,
                         watched.retries + 1)
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
