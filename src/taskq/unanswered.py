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

from taskq.boundary import lost_in_transit, redis_errors

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


class Unanswered:
    """One broker's lease calls that may have run unanswered, for the next lease call
    (or maintenance turn) to replay by request id (lease.lua hands the same worker what
    that call leased) and give back unstarted. Only request ids taskq drew are kept: a
    caller who gives its own retries the call itself. The broker's threads share it:
    list appends and pops are atomic, so each call is replayed by one thread at once."""

    __slots__ = ("_calls",)

    def __init__(self) -> None:
        self._calls: list[Call] = []

    def errors(self, operation: str, worker_id: str, request_id: str,
               lease_seconds: float) -> lease_errors:
        """redis_errors for a lease call made with `request_id`, keeping the call here
        if its round trip fails."""
        return lease_errors(operation, self, worker_id, request_id, lease_seconds)

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

    def replayed(self, call: Call, leased: bool) -> None:
        """`call` was replayed: done with if it had leased tasks (now given back), or if
        its memo was looked for in vain a lease after the first such answer; else kept
        to be asked again."""
        if leased:
            return
        now = time.monotonic()
        if call.quiet_until is None:
            call.quiet_until = now + call.lease_seconds
        if now < call.quiet_until:
            self.keep(call)


class lease_errors(redis_errors):  # lower case, as redis_errors
    """redis_errors for a lease call: one whose round trip failed may have run, and is
    kept in its broker's Unanswered to be replayed."""

    __slots__ = ("calls", "lease_seconds", "request_id", "worker_id")

    def __init__(self, operation: str, calls: Unanswered, worker_id: str, request_id: str,
                 lease_seconds: float) -> None:
        super().__init__(operation)
        self.calls, self.worker_id = calls, worker_id
        self.request_id, self.lease_seconds = request_id, lease_seconds

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        if lost_in_transit(error):
            self.calls.keep(Call(self.worker_id, self.request_id, self.lease_seconds))
        super().__exit__(kind, error, _tb)
