"""asyncio connections that keep every cancel, and a pool that passes on a wake-up a
cancelled waiter took: what redis-py's asyncio client, on Python 3.11, loses at the
moment a cancel meets the end of a write or of a wait for a connection. Both go past
redis-py's public API (a connection's write, the pool's wait), as `single` does;
tests/test_connection.py checks each against the redis-py installed."""

from __future__ import annotations

import asyncio
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.connection import AbstractConnection


class KeepsCancels(AbstractConnection):
    """Mixed into an asyncio connection's class: a cancel always ends its write.
    redis-py bounds a write by asyncio.wait_for, which on Python 3.11 drops a cancel
    that lands as the write completes: the call then goes on until Redis answers, past
    its caller's timeout however long Redis stalls. The write is bounded by
    asyncio.timeout here instead, which keeps every cancel."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        timeout = self.socket_timeout
        if not timeout:
            await super().send_packed_command(command, check_health)
            return
        self.socket_timeout = None  # so redis-py's own bound, the wait_for, is left out
        try:
            async with asyncio.timeout(timeout):
                await super().send_packed_command(command, check_health)
        except TimeoutError:
            raise redis.TimeoutError("Timeout writing to socket") from None
        finally:
            self.socket_timeout = timeout


_KEEPING: dict[type[AbstractConnection], type[AbstractConnection]] = {}


def keeping_cancels(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """`base` (the class a pool's URL chose: plain, TLS or Unix socket) with
    `KeepsCancels` mixed in."""
    if issubclass(base, KeepsCancels):
        return base
    if base not in _KEEPING:
        _KEEPING[base] = type(f"CancelKeeping{base.__name__}", (KeepsCancels, base), {})
    return _KEEPING[base]


class KeepingPool(redis.asyncio.BlockingConnectionPool):
    """redis-py's blocking pool, whose connections keep cancels (`KeepsCancels`), and
    whose waiters pass on a wake-up they took. A waiter cancelled (or timed out) just
    as `release` notified it takes the notice with it (asyncio.Condition before Python
    3.13): the next waiter would wait out its whole timeout beside a free connection,
    to fail with "No connection available"."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.connection_class = keeping_cancels(self.connection_class)

    async def get_connection(self, *args: Any, **kwargs: Any) -> AbstractConnection:
        try:
            connection: AbstractConnection = await super().get_connection(  # type: ignore[no-untyped-call]
                *args, **kwargs)
        except BaseException:
            async with self._condition:
                self._condition.notify()
            raise
        return connection
