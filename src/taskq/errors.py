"""The one error hierarchy every taskq failure belongs to."""

from __future__ import annotations

from datetime import timedelta


class TaskqError(Exception):
    """Raised when anything in taskq fails; the root of every taskq error."""


class ConfigError(TaskqError):
    """Raised when an environment variable or option has a value taskq cannot use."""


class InvalidTaskError(TaskqError):
    """Raised when a task cannot be enqueued as given (bad id, name, delay or retries)."""


class PayloadError(InvalidTaskError):
    """Raised when a payload cannot be encoded as JSON or decoded back."""


class PayloadTooLargeError(PayloadError):
    """Raised when an encoded payload exceeds the configured size limit."""


class ResultError(TaskqError):
    """Raised when a handler's return value cannot be kept: it has no JSON form, or its
    JSON is over the size limit. The attempt counts as failed with this error."""


class TaskFailed(TaskqError):
    """Raised when a task handle's `result()` finds the task dead: it failed its last
    attempt. Carries what the worker saw: the exception's type (as module.Name), its
    message and the whole traceback, as text (the remote exception itself is not
    rebuilt: its class may not exist in the producer)."""

    def __init__(self, task_id: str, error_type: str, message: str, traceback: str,
                 attempts: int) -> None:
        self.task_id = task_id
        self.error_type = error_type
        self.message = message
        self.traceback = traceback
        self.attempts = attempts
        said = f"{error_type}: {message}" if message else error_type
        text = f"task {task_id} failed after {attempts} attempt(s): {said}"
        if traceback:
            text += f"\n\nTraceback of its last attempt, on the worker:\n{traceback.rstrip()}"
        super().__init__(text)

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from its fields, not its message (what Exception would pass back):
        # pickled to another process, or copied, it stays the same error.
        return (type(self), (self.task_id, self.error_type, self.message, self.traceback,
                             self.attempts), self.__dict__)


class UpstreamFailed(TaskFailed):
    """Raised by the handle of a workflow's step that never ran because a step before it
    did not complete (it died, or was cancelled), and by the workflow's `result()`:
    `upstream` names the first such step, and the message says what each one did."""

    def __init__(self, task_id: str, upstream: str, error_type: str, message: str,
                 verb: str = "did not run", subject: str = "") -> None:
        self.upstream = upstream
        super().__init__(task_id, error_type, message, "", 0)
        self.verb, self.subject = verb, subject
        named = f"{subject} {task_id}" if subject else task_id
        self.args = (f"{named} {verb}: {message}",)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.task_id, self.upstream, self.error_type, self.message,
                             self.verb, self.subject), self.__dict__)

    def __str__(self) -> str:
        return str(self.args[0])


class TaskCancelledError(TaskqError):
    """Raised when a task handle's `result()` finds the task cancelled: it was cancelled
    before it ran, out of the DLQ, or while it ran (its handler stopped, its effects
    refused from the moment its worker learned of the cancel); and by a workflow's
    `result()`, `task_id` then holding the workflow's id."""

    def __init__(self, task_id: str, subject: str = "task") -> None:
        self.task_id, self.subject = task_id, subject
        super().__init__(f"{subject} {task_id} was cancelled, so it has no result")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.task_id, self.subject), self.__dict__)


class ResultTimeoutError(TaskqError, TimeoutError):
    """Raised when `result(timeout=...)` sees no end of the task within the timeout;
    the task itself is not affected and may still end later."""


class IdleTimeoutError(TaskqError, TimeoutError):
    """Raised when `taskq.testing.TaskRunner.run_until_idle` finds the queue still holds
    ready, running or delayed tasks at its timeout; the message lists them."""


class TaskNotFoundError(TaskqError):
    """Raised when no record of a task exists: it never did, or it ended and its record
    expired (completed records are kept COMPLETED_TTL_SECONDS, or the task's result_ttl)."""


class NoResultError(TaskqError):
    """Raised when `result()` is asked for a task that completed without keeping a
    result: its task was registered with `store_result=False`, or the worker acked it at
    shutdown after its effect and cut off the rest of its handler."""


class Retry(TaskqError):
    """Raised by a handler to ask for its task to run again after `delay` seconds (None:
    after the task's backoff). The attempt counts: a task with no retries left goes to
    the DLQ. Its task's retry policy does not apply: a handler that asks is retried."""

    def __init__(self, delay: float | timedelta | None = None, reason: str = "") -> None:
        # Checked here, in the handler that raises it, rather than when the worker sends
        # the retry: limits needs this module, so it is imported late.
        from taskq.limits import DELAY  # noqa: PLC0415

        self.delay = None if delay is None else DELAY.check(delay, "Retry delay")
        self.reason = reason
        after = "after its backoff" if self.delay is None else f"in {self.delay + 0.0:g}s"
        super().__init__(f"retry asked for {after}" + (f": {reason}" if reason else ""))

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.delay, self.reason), self.__dict__)


class TimeLimitExceeded(TaskqError):
    """Raised as the failure of an attempt that ran past its task's time limit (the
    handler is cancelled if it is `async def`, abandoned if not); retried as its task's
    retry policy says."""


class UnknownTaskError(TaskqError):
    """Raised when a worker leases a task whose name no registered function has."""


class BrokerError(TaskqError):
    """Raised when Redis cannot be reached or answers an operation with an error."""


class IncompleteEnqueueError(BrokerError):
    """Raised when an enqueue may have made some of its tasks and not others, or a
    workflow's start may have run, past what TASKQ_PRODUCER_RETRY_SECONDS rides out: a
    send got no reply (Redis may have run it), or a batch failed after earlier batches
    or shards went in. `task_ids` names every task of the enqueue: an id that names a
    task is not enqueued again, so sending tasks with those ids (`task_id=`) again
    makes only the missing ones. `flow_id` names the workflow: `enqueue(flow_id=...)`
    starts it only if it did not."""

    def __init__(self, message: str, task_ids: tuple[str, ...] = (),
                 flow_id: str | None = None) -> None:
        super().__init__(message)
        self.task_ids = task_ids
        self.flow_id = flow_id


class UnsafeRedisError(BrokerError):
    """Raised when the Redis server is configured in a way that could lose queue keys."""


class EmbeddedRedisError(TaskqError):
    """Raised when the embedded redis-server cannot be found or started."""


class LedgerError(TaskqError):
    """Raised when the SQLite ledger is misconfigured or cannot be written."""
