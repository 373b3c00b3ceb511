"""Lease calls whose reply never came: Redis may have run them (a command sent before
the connection failed still runs once the server reads it), leasing tasks that no
worker holds. Unless they are taken back, those tasks wait out their lease and are
reaped as a failed attempt they never made, or sent to the DLQ without ever running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import NamedTuple

import redis

from taskq.errors import BrokerError

# Calls kept per broker at most: through a long outage a worker's every lease fails,
# and only those within a lease of now can still have tasks to give back.
KEPT = 64


class Call(NamedTuple):
    worker_id: str
    request_id: str
    until: float  # monotonic: when its lease, and lease.lua's memo of it, run out


def unanswered(error: BrokerError) -> bool:
    """Whether the call that raised `error` may have run: its round trip failed, rather
    than Redis answering it with an error."""
    return isinstance(error.__cause__, redis.ConnectionError | redis.TimeoutError)


class Unanswered:
    """One broker's lease calls that may have run unanswered, for the next lease call to
    replay by request id (lease.lua hands the same worker what that call leased) and
    give back unstarted. The broker's threads share it: list appends and pops are
    atomic, so each call is replayed by one thread only."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[Call] = []

    def note(self, error: BrokerError, worker_id: str, request_id: str,
             lease_seconds: float) -> None:
        if unanswered(error):
            self.keep(Call(worker_id, request_id, time.monotonic() + lease_seconds))

    def keep(self, call: Call) -> None:
        self._calls.append(call)
        del self._calls[:-KEPT]

    def __bool__(self) -> bool:
        return bool(self._calls)

    def take(self) -> Iterator[Call]:
        """Each call still within its lease, removed as it is handed out."""
        while True:
            try:
                call = self._calls.pop()
            except IndexError:  # none left, or another thread took the last
                return
            if call.until > time.monotonic():
                yield call
