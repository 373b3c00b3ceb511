"""The worker's helper threads: heartbeats for leases in hand, and the wake-up listener."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Literal

from taskq.broker import Broker
from taskq.context import TaskContext
from taskq.errors import BrokerError

log = logging.getLogger("taskq.worker")


class Heartbeat(threading.Thread):
    """Every lease/3 seconds, renew the lease of every task in hand, draining included.

    A renewal answered "stale" marks the task's context lost, which fences its effects;
    an outage is logged and tried again next beat: the lease survives two missed beats.
    """

    def __init__(
        self,
        broker: Broker,
        lease_seconds: float,
        in_hand: Callable[[], list[TaskContext]],
    ) -> None:
        super().__init__(name="taskq-heartbeat", daemon=True)
        self.broker = broker
        self.lease_seconds = lease_seconds
        self.in_hand = in_hand
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(self.lease_seconds / 3):
            self.beat()

    def beat(self) -> None:
        for context in self.in_hand():
            if context.lease_lost or context.finished:
                continue
            try:
                held = self.broker.heartbeat(context.task_id, context.token, self.lease_seconds)
            except BrokerError as e:
                log.warning("heartbeat for %s failed, will retry: %s", context.task_id, e)
                continue
            if not held and not context.finished:
                log.warning("task %s lost its lease (token %d): another worker may run it",
                            context.task_id, context.token)
                context.mark_lost()

    def stop(self) -> None:
        self.stopping.set()


# What one wait for work came to: "woken" (the loop should look around), "again" (the
# wait leased what there was and ready is empty: keep waiting, the loop has nothing to
# do), or "away" (Redis could not be asked).
WaitOutcome = Literal["woken", "again", "away"]


class Waker(threading.Thread):
    """Waits for work while the worker is idle, so no idle worker sits out a poll
    interval: `wait(timeout)` blocks until a producer signals work (and may lease it in
    the same round trip); the loop is nudged unless the wait says there is no need."""

    def __init__(self, wait: Callable[[float], WaitOutcome], wake: Callable[[], None],
                 timeout: float) -> None:
        super().__init__(name="taskq-waker", daemon=True)
        self.wait = wait
        self.wake = wake
        self.timeout = timeout
        self.armed = threading.Event()
        self.stopping = threading.Event()

    def arm(self) -> None:
        self.armed.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.armed.wait(self.timeout):
                continue
            outcome = self.wait(self.timeout)
            if outcome == "again":
                continue
            if outcome == "away":
                self.stopping.wait(self.timeout)  # the loop's next call will say why
            self.armed.clear()
            self.wake()

    def stop(self) -> None:
        self.stopping.set()
        self.armed.set()
