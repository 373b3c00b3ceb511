"""What a running handler can know about its task, and the fence around its effects."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from taskq.errors import TaskqError


class LeaseLostError(TaskqError):
    """Raised inside a handler's `effect()` block when its task may no longer be applied:
    the lease was lost to another worker, or the worker abandoned the task at shutdown."""


@dataclass
class TaskContext:
    """The task a handler is running: its id, attempt and fencing token, and its lease."""

    task_id: str
    name: str
    queue: str
    worker_id: str
    token: int
    attempt: int
    max_retries: int
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _lost: bool = field(default=False, repr=False)
    _abandoned: bool = field(default=False, repr=False)
    finished: bool = field(default=False, repr=False)

    @property
    def lease_lost(self) -> bool:
        return self._lost

    @property
    def abandoned(self) -> bool:
        return self._abandoned

    def mark_lost(self) -> None:
        with self._lock:
            self._lost = True

    def abandon(self) -> None:
        """Forbid any later effect; waits for one already under way to finish first."""
        with self._lock:
            self._abandoned = True

    @contextmanager
    def effect(self) -> Iterator[None]:
        """Run a side effect only while this worker may still apply it.

        The worker takes the same lock before it gives the task back at shutdown, so an
        effect is either finished before the release or never started after it.
        """
        with self._lock:
            if self._abandoned:
                raise LeaseLostError(
                    f"task {self.task_id} was released at shutdown; its effect is skipped"
                )
            if self._lost:
                raise LeaseLostError(
                    f"task {self.task_id} lost its lease (token {self.token}); "
                    "its effect is skipped"
                )
            yield


_current: contextvars.ContextVar[TaskContext] = contextvars.ContextVar("taskq_current_task")


def current_task() -> TaskContext:
    """The context of the task the calling handler runs; raises outside a handler."""
    try:
        return _current.get()
    except LookupError:
        raise TaskqError("current_task() was called outside a running task handler") from None


def bind(context: TaskContext) -> contextvars.Token[TaskContext]:
    return _current.set(context)


def unbind(token: contextvars.Token[TaskContext]) -> None:
    _current.reset(token)
