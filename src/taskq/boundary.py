"""What crosses the Redis boundary: its errors, its reply values, and durations in ms."""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import RedisClusterException

from taskq.errors import BrokerError


class redis_errors:  # lower case: it reads as a function at every `with`
    """Turn Redis failures into `BrokerError`, naming the operation that failed.

    A class, not a `@contextmanager` generator: it wraps every broker call, on the path
    from a producer to a handler, where a generator's set-up is not free."""

    __slots__ = ("operation",)

    def __init__(self, operation: str) -> None:
        self.operation = operation

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if isinstance(error, redis.RedisError | RedisClusterException):
            raise broker_error(self.operation, error) from error


# What each operation name passed to `redis_errors` does, as a user would say it; a
# name not listed here is used as it is.
OPERATIONS = {
    "enqueue": "enqueue tasks",
    "register queue": "register the queue",
    "lease": "lease a task",
    "heartbeat": "renew a lease",
    "ack": "mark a task completed",
    "ack and lease": "mark tasks completed and lease more",
    "fail": "record a failed attempt",
    "release": "hand back a leased task",
    "reap": "take back expired leases",
    "promote": "move due delayed tasks to ready",
    "retry_dead": "retry a dead task",
    "purge": "delete old dead tasks",
    "payload": "read a task's payload",
    "dead": "list the dead letter queue",
    "task": "read a task's record",
    "counts": "count the queue's tasks",
    "time": "read the server's clock",
    "queues": "list the queues",
    "snapshot": "read the queue's state",
}


def broker_error(operation: str, error: BaseException) -> BrokerError:
    """The `BrokerError` for a Redis failure of `operation`, in the user's words."""
    words = OPERATIONS.get(operation, operation)
    detail = str(error).rstrip(".")
    if isinstance(error, redis.ConnectionError | redis.TimeoutError):
        return BrokerError(f"cannot reach Redis to {words}: {detail}")
    return BrokerError(f"Redis could not {words}: {type(error).__name__}: {detail}")


def text(value: Any) -> str:
    """A reply value as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)

