"""Lease calls whose reply never came: Redis may have run them (a command sent before
the connection failed still runs once the server reads it, however long it was
paused), leasing tasks that no worker holds. Unless they are taken back, those tasks
wait out their lease and are reaped as a failed attempt they never made, or sent to
the DLQ without ever running.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import redis

from taskq.errors import BrokerError

# Calls kept per broker at most: through a long outage a worker's every lease fails.
KEPT = 64


@dataclass
class Call:
    """A lease call that may have run unanswered. `quiet_until` (monotonic) is set once
    a replay found no memo of it: Redis may still be about to run it (a paused server
    reads the closed connection's command when it wakes), so it is asked again until a
    lease after that answer, by when a run of it would have left its memo to replay."""

    worker_id: str
    request_id: str
    lease_seconds: float
    quiet_until: float | None = None


def unanswered(error: BrokerError) -> bool:
    """Whether the call that raised `error` may have run: its round trip failed, rather
    than Redis answering it with an error."""
    return isinstance(error.__cause__, redis.ConnectionError | redis.TimeoutError)


class Unanswered:
    """One broker's lease calls that may have run unanswered, for the next lease call
    (or maintenance turn) to replay by request id (lease.lua hands the same worker what
    that call leased) and give back unstarted. Only request ids taskq drew are kept: a
    caller who gives its own retries the call itself. The broker's threads share it:
    list appends and pops are atomic, so each call is replayed by one thread at once."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[Call] = []

    def note(self, error: BrokerError, worker_id: str, request_id: str,
             lease_seconds: float) -> None:
        if unanswered(error):
            self.keep(Call(worker_id, request_id, lease_seconds))

    def keep(self, call: Call) -> None:
        self._calls.append(call)
        del self._calls[:-KEPT]

    def __bool__(self) -> bool:
        return bool(self._calls)

    def take(self) -> Iterator[Call]:
        """Each call kept, removed as it is handed out (`keep` puts one back)."""
        for _ in range(len(self._calls)):
            try:
                yield self._calls.pop(0)
            except IndexError:  # another thread took the last
                return

    @staticmethod
    def answered_empty(call: Call) -> bool:
        """Whether `call`, replayed and found to have leased nothing, is done with: its
        memo was looked for at least a lease after the first such answer."""
        now = time.monotonic()
        if call.quiet_until is None:
            call.quiet_until = now + call.lease_seconds
            return False
        return now >= call.quiet_until
