"""taskq: a Redis task queue that loses no task, applies no effect twice, and shows it live."""

from taskq.app import App, Task
from taskq.broker import Broker, Enqueued, FailResult, LeaseBatch, LeasedTask, NewTask
from taskq.canvas import Chain, Group, MemberFailure, Step, chain, failure_of, group
from taskq.connection import connect
from taskq.context import LeaseLostError, TaskContext, current_task
from taskq.errors import (
    BrokerError,
    ConfigError,
    EmbeddedRedisError,
    IdleTimeoutError,
    IncompleteEnqueueError,
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
    UpstreamFailed,
)
from taskq.flow_handle import WorkflowHandle
from taskq.flows import FlowCancellation, FlowStatus, StepState
from taskq.handle import TaskHandle
from taskq.options import Options
from taskq.results import Cancellation, Failure, TaskRecord
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
    "Chain",
    "ConfigError",
    "EmbeddedRedisError",
    "Enqueued",
    "FailResult",
    "Failure",
    "FlowCancellation",
    "FlowStatus",
    "Group",
    "IdleTimeoutError",
    "IncompleteEnqueueError",
    "InvalidTaskError",
    "LeaseBatch",
    "LeaseLostError",
    "LeasedTask",
    "Ledger",
    "LedgerError",
    "MemberFailure",
    "NewTask",
    "NoResultError",
    "Options",
    "PayloadError",
    "PayloadTooLargeError",
    "ResultError",
    "ResultTimeoutError",
    "Retry",
    "RetryPolicy",
    "Settings",
    "Step",
    "StepState",
    "Task",
    "TaskCancelledError",
    "TaskContext",
    "TaskFailed",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskRecord",
    "TaskqError",
    "TimeLimitExceeded",
    "UnknownTaskError",
    "UnsafeRedisError",
    "UpstreamFailed",
    "Worker",
    "WorkflowHandle",
    "__version__",
    "chain",
    "connect",
    "current_task",
    "failure_of",
    "group",
]
