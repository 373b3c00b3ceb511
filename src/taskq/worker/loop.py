"""The worker: its parts wired together, `run()`, and one turn of its loop.

Threads, and the one module each one's code lives in: the loop (this module, on the
thread that calls `run`), the waker (`waker.py`), the heartbeat (`heartbeat.py`), the
handlers (`runner.py`). What they share lives in one `Slots` (`slots.py`); they talk
to the loop through its `Inbox` (`inbox.py`).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid

from taskq.app import App
from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.results import LeaseBatch
from taskq.settings import Settings
from taskq.worker.dispatch import Dispatcher
from taskq.worker.heartbeat import Heartbeat, LeaseCheck
from taskq.worker.inbox import Inbox, Outcome
from taskq.worker.lifecycle import Lifecycle
from taskq.worker.maintenance import Maintenance
from taskq.worker.outage import Backoff
from taskq.worker.runner import Runner
from taskq.worker.settle import Settler
from taskq.worker.slots import Slots, Stats
from taskq.worker.waker import Waker

log = logging.getLogger("taskq.worker")


def make_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs an App's tasks from one queue with `concurrency` handlers at a time."""

    def __init__(
        self,
        app: App,
        *,
        settings: Settings | None = None,
        broker: Broker | None = None,
        concurrency: int | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.app = app
        self.settings = s = settings or app.settings
        self.broker = broker or app.make_broker()
        # Every lease this worker makes applies its app's rate limits (see taskq.rates)
        # and concurrency limits (taskq.concurrency).
        self.broker.rate_limits = app.rate_limits()
        self.broker.concurrency_limits = app.concurrency_limits()
        self.concurrency = concurrency or s.concurrency
        self.worker_id = worker_id or make_worker_id()
        self.slots = Slots(self.concurrency)
        self.inbox = Inbox()
        self.lifecycle = Lifecycle(s.shutdown_grace_seconds, self.inbox)
        self.runner = Runner(app, self.concurrency, self.inbox, s.time_limit_seconds)
        self.dispatcher = Dispatcher(self.broker.queue, self.worker_id, self.slots, self.runner,
                                     LeaseCheck(self.broker, s.lease_seconds))
        self.heartbeat = Heartbeat(self.broker, s, self.slots, self.runner)
        self.waker = Waker(self.broker, s, self.worker_id, self.slots, self.dispatcher,
                           self.runner, self.lifecycle, self.inbox)
        self.settler = Settler(self.broker, s, self.slots, self.worker_id)
        self.maintenance = Maintenance(self.broker, s, app.schedules.values())
        self._backoff = Backoff()

    @property
    def stats(self) -> Stats:
        return self.slots.stats()

    def run(self, install_signal_handlers: bool = True) -> int:
        """Work until asked to stop and drained; returns the process exit status."""
        if install_signal_handlers:
            self.lifecycle.install_signal_handlers()
        log.info("worker %s on queue %r, concurrency %d, lease %.1fs",
                 self.worker_id, self.broker.queue, self.concurrency, self.settings.lease_seconds)
        self.runner.start()
        self.heartbeat.start()
        self.waker.start()
        try:
            while not self._finished():
                if self.lifecycle.running:
                    self._wait(self._turn())
                else:
                    self._drain()
                    self._wait(None)
            self.settler.settle(self.inbox.take())
        finally:
            self.settler.abandon(self.slots.in_hand())
            self.heartbeat.stop()
            self.waker.stop()
            self.runner.close()
            self.lifecycle.stopped()
            log.info("worker %s done: %s", self.worker_id, self.stats)
        return 0

    def stop(self, reason: str = "stop requested") -> None:
        """Drain and stop, as the first SIGTERM would."""
        self.lifecycle.request_stop(reason)

    # -- one turn ----------------------------------------------------------------------

    def _turn(self) -> float:
        """Settle finished handlers and fill the free slots (theirs included) in one round
        trip, then promote and reap; leasing first keeps maintenance off the path from a
        new task to its handler. Returns how long the loop may wait before looking again."""
        outcomes = self.inbox.take()
        free = self.slots.reserve(finishing=len(outcomes))
        try:
            batch = self._settle_and_refill(outcomes, free)
        except BrokerError as e:
            return self._backoff.failed(e)
        finally:
            self.slots.unreserve(free)
        try:
            promoted = self.maintenance.run(backlog=batch is not None and len(batch.tasks) == free)
        except BrokerError as e:
            return self._backoff.failed(e)
        self._backoff.succeeded()
        return self._idle_wait(batch, free, promoted)

    def _settle_and_refill(self, outcomes: list[Outcome], free: int) -> LeaseBatch | None:
        """Settle `outcomes` with a lease of `free` tasks carried by their acks, or lease
        alone when there is nothing to carry it; start what the lease took."""
        sent = time.monotonic()
        batch = self.settler.settle(outcomes, refill=free).refill if outcomes else None
        if batch is None and free > 0:
            sent = time.monotonic()
            batch = self.broker.lease_many(self.worker_id, self.settings.lease_seconds, free)
        if batch is not None:
            self.dispatcher.start(batch, sent)
        return batch

    def _idle_wait(self, batch: LeaseBatch | None, free: int, promoted: int) -> float:
        """0 when there may be more to lease at once; else arm the waker and wait until
        the broker's hint (the next delayed task or lease expiry) or the next periodic
        tick, at most a poll."""
        waits = [self.settings.poll_seconds, self.maintenance.wait_seconds()]
        if batch is None:
            return min(w for w in waits if w is not None)
        if len(batch.tasks) == free or promoted:
            return 0.0
        self.waker.arm()
        return min(w for w in [*waits, batch.wait_seconds] if w is not None)

    def _drain(self) -> None:
        """While draining: settle what finishes, lease nothing."""
        self.settler.settle(self.inbox.take())

    def _finished(self) -> bool:
        if self.lifecycle.running:
            return False
        # A lease still under way on the waker's thread may yet put tasks in hand.
        return self.slots.idle() or self.lifecycle.grace_expired()

    def _wait(self, seconds: float | None) -> None:
        """Sleep until a handler finishes, work arrives, a signal comes, or `seconds` pass
        (None: a poll interval)."""
        if seconds == 0.0:
            return
        timeout = self.settings.poll_seconds if seconds is None else seconds
        if self.lifecycle.draining:
            timeout = min(timeout, max(0.01, self.lifecycle.drain_deadline - time.monotonic()))
        self.inbox.wait(timeout)
