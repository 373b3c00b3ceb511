"""What a worker's threads share: the tasks in hand, the slots reserved, the counters."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Literal

from taskq.context import TaskContext

Counter = Literal["acked", "retried", "dead", "stale", "released", "cancelled"]


@dataclass
class Stats:
    """What this worker did, for its final log line and for tests."""

    leased: int = 0
    acked: int = 0
    retried: int = 0
    dead: int = 0
    stale: int = 0
    released: int = 0
    cancelled: int = 0


class Slots:
    """The one owner of the state the loop, the waker, the heartbeat and the handlers
    share, behind one lock: the tasks in hand (each with its context), the slots that a
    lease under way may fill, and the counters.

    Tasks in hand are keyed by `TaskContext.key` (queue, task id, token): after a lost
    lease this worker may lease the same task again while the stale run is still in
    hand, and both need heartbeats until they are settled."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        # Notified when a reservation is given back, for `close`.
        self._unreserved = threading.Condition(self._lock)
        self._in_hand: dict[tuple[str, str, int], TaskContext] = {}
        self._reserved = 0
        self._closed = False
        self._stats = Stats()

    def reserve(self, finishing: int = 0) -> int:
        """Reserve every free slot for a lease about to be made, counting as free the
        slots of `finishing` handlers (done, still in hand until settled); returns how
        many (none once closed). Two threads leasing at once never lease more than fits."""
        with self._lock:
            if self._closed:
                return 0
            busy = len(self._in_hand) - finishing + self._reserved
            free = max(0, self.capacity - busy)
            self._reserved += free
            return free

    def unreserve(self, slots: int) -> None:
        """Give back a reservation once the tasks its lease took are in hand (or were
        given back)."""
        with self._lock:
            self._reserved -= slots
            self._unreserved.notify_all()

    def hold(self, *contexts: TaskContext) -> bool:
        """Put leased tasks in hand: heartbeats cover them from now on. False once
        closed: nothing is taken, and the caller gives the tasks back."""
        with self._lock:
            if self._closed:
                return False
            for context in contexts:
                self._in_hand[context.key] = context
            self._stats.leased += len(contexts)
            return True

    def close(self, timeout: float) -> None:
        """The worker is done: reserve and hold nothing more, and wait up to `timeout`
        seconds for the leases under way to be put in hand or given back, so what is in
        hand after this is all there will be. A lease still under way after that cannot
        put its tasks in hand: its thread gives them back."""
        with self._lock:
            self._closed = True
            self._unreserved.wait_for(lambda: not self._reserved, timeout)

    def let_go(self, *contexts: TaskContext) -> None:
        """Take settled tasks out of hand."""
        with self._lock:
            for context in contexts:
                self._in_hand.pop(context.key, None)

    def in_hand(self) -> list[TaskContext]:
        with self._lock:
            return list(self._in_hand.values())

    def idle(self) -> bool:
        """No task in hand and no lease under way that could put one there."""
        with self._lock:
            return not self._in_hand and not self._reserved

    def count(self, counter: Counter, n: int = 1) -> None:
        with self._lock:
            setattr(self._stats, counter, getattr(self._stats, counter) + n)

    def stats(self) -> Stats:
        """A copy of the counters as they are now."""
        with self._lock:
            return dataclasses.replace(self._stats)
