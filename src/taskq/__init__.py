"""taskq: a Redis task queue that loses no task, applies no effect twice, and shows it live."""

from taskq.app import App, Task
from taskq.broker import Broker, Enqueued, FailResult, LeaseBatch, LeasedTask, NewTask
from taskq.connection import connect
from taskq.context import LeaseLostError, TaskContext, current_task
from taskq.errors import (
    BrokerError,
    ConfigError,
    EmbeddedRedisError,
    IdleTimeoutError,
    InvalidTaskError,
    LedgerError,
    NoResultError,
    PayloadError,
    PayloadTooLargeError,
    ResultError,
    ResultTimeoutError,
    Retry,
    TaskCancelledError,
    TaskFailed,
    TaskNotFoundError,
    TaskqError,
    TimeLimitExceeded,
    UnknownTaskError,
    UnsafeRedisError,
)
from taskq.handle import TaskHandle
from taskq.results import Cancellation, Failure
from taskq.retry import RetryPolicy
from taskq.settings import Settings
from taskq.tools.ledger import Ledger
from taskq.version import __version__
from taskq.worker import Worker

__all__ = [
    "App",
    "Broker",
    "BrokerError",
    "Cancellation",
    "ConfigError",
    "EmbeddedRedisError",
    "Enqueued",
    "FailResult",
    "Failure",
    "IdleTimeoutError",
    "InvalidTaskError",
    "LeaseBatch",
    "LeaseLostError",
    "LeasedTask",
    "Ledger",
    "LedgerError",
    "NewTask",
    "NoResultError",
    "PayloadError",
    "PayloadTooLargeError",
    "ResultError",
    "ResultTimeoutError",
    "Retry",
    "RetryPolicy",
    "Settings",
    "Task",
    "TaskCancelledError",
    "TaskContext",
    "TaskFailed",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskqError",
    "TimeLimitExceeded",
    "UnknownTaskError",
    "UnsafeRedisError",
    "Worker",
    "__version__",
    "connect",
    "current_task",
]
