"""What crosses the Redis boundary: its errors, its reply values, and durations in ms."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from taskq.errors import BrokerError, InvalidTaskError


@contextmanager
def redis_errors(operation: str) -> Iterator[None]:
    """Turn Redis failures into `BrokerError`, naming the operation that failed."""
    try:
        yield
    except (redis.RedisError, RedisClusterException) as e:
        raise BrokerError(f"{operation} failed: {type(e).__name__}: {e}") from e


def text(value: Any) -> str:
    """A reply value as text, whether the client decodes responses or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


def to_ms(seconds: float, what: str) -> int:
    """Whole milliseconds of `seconds`, or `InvalidTaskError` naming `what`."""
    number = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    if not number or not math.isfinite(seconds * 1000) or seconds < 0:
        raise InvalidTaskError(f"{what} must be a finite number of seconds >= 0, not {seconds!r}")
    return round(seconds * 1000)
