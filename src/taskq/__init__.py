"""taskq: a Redis task queue that loses no task, applies no effect twice, and shows it live."""

from taskq.app import App, Task
from taskq.broker import Broker, Enqueued, FailResult, LeaseBatch, LeasedTask, NewTask
from taskq.connection import connect
from taskq.context import LeaseLostError, TaskContext, current_task
from taskq.errors import (
    BrokerError,
    ConfigError,
    EmbeddedRedisError,
    InvalidTaskError,
    LedgerError,
    PayloadError,
    PayloadTooLargeError,
    TaskqError,
    UnknownTaskError,
    UnsafeRedisError,
)
from taskq.settings import Settings
from taskq.tools.ledger import Ledger
from taskq.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "App",
    "Broker",
    "BrokerError",
    "ConfigError",
    "EmbeddedRedisError",
    "Enqueued",
    "FailResult",
    "InvalidTaskError",
    "LeaseBatch",
    "LeaseLostError",
    "LeasedTask",
    "Ledger",
    "LedgerError",
    "NewTask",
    "PayloadError",
    "PayloadTooLargeError",
    "Settings",
    "Task",
    "TaskContext",
    "TaskqError",
    "UnknownTaskError",
    "UnsafeRedisError",
    "Worker",
    "__version__",
    "connect",
    "current_task",
]
