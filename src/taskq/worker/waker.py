"""The waker thread: while the worker is idle, it waits for work and leases it at once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Literal

from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.results import LeaseBatch, Released
from taskq.settings import Settings
from taskq.worker.dispatch import Dispatcher
from taskq.worker.due import Due
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
from taskq.worker.runner import Runner
from taskq.worker.slots import Slots

log = logging.getLogger("taskq.worker")

# How long the waker, having started tasks, stands aside for their handlers to start
# before it waits for work again (they start in well under a millisecond).
HANDOFF_SECONDS = 0.002

# What one wait for work came to: "woken" (the loop should look around), "again" (the
# wait leased what there was and ready is empty: keep waiting, the loop has nothing to
# do), or "away" (Redis could not be asked).
WaitOutcome = Literal["woken", "again", "away"]


class Waker(threading.Thread):
    """Waits for work while the worker is idle, so no idle worker sits out a poll
    interval. Armed by the loop when it goes idle, it blocks until a producer signals
    work on a queue of `watched`. With a `dispatcher` (a worker on one queue), on a
    single node the tasks that woke it are leased in the same round trip and started
    from here, sparing the first task a wait for the loop's thread and a second round
    trip. Without one (a worker on several queues) it leaves the lease to the loop,
    which keeps the queues' order. It nudges the loop unless the wait says there is no
    need.

    Promoting due tasks and reaping expired leases are the loop's: a lease of the
    waker's own that says something comes due sooner than the worker knew `note`s it in
    `due` and nudges the loop, which would otherwise wait out its own wait while the
    waker holds the free slots.

    All of `watched` are waited on in one call, so they must share a slot unless the
    transport `spans_slots`: on a cluster a worker on several queues has a waker per
    queue."""

    def __init__(self, watched: Sequence[Broker], settings: Settings, worker_id: str,
                 slots: Slots, due: Due, dispatcher: Dispatcher | None, runner: Runner,
                 lifecycle: Lifecycle, inbox: Inbox, name: str = "taskq-waker") -> None:
        super().__init__(name=name, daemon=True)
        self.broker, self.also = watched[0], tuple(watched[1:])
        self.lease_seconds = settings.lease_seconds
        self.worker_id = worker_id
        self.slots = slots
        self.due = due
        self.dispatcher = dispatcher
        self.runner = runner
        self.lifecycle = lifecycle
        self.inbox = inbox
        # A blocking read must end well before the socket's read timeout does.
        self.timeout = max(0.05, min(settings.poll_seconds, settings.redis_timeout_seconds / 2))
        self.armed = threading.Event()
        self.stopping = threading.Event()

    def arm(self) -> None:
        self.armed.set()

    def stop(self) -> None:
        self.stopping.set()
        self.armed.set()

    def run(self) -> None:
        while not self.stopping.is_set():
            if not self.armed.wait(self.timeout):
                continue
            outcome = self.wait_for_work()
            if outcome == "again":
                continue
            if outcome == "away":
                self.stopping.wait(self.timeout)  # the loop's next call will say why
            self.armed.clear()
            self.inbox.nudge()

    def wait_for_work(self) -> WaitOutcome:
        """Block until a producer signals work, leasing it in the same round trip where
        the transport can; a lease that emptied ready leaves nothing for the loop to do."""
        dispatcher = self.dispatcher
        free = self.slots.reserve() if dispatcher is not None and self.lifecycle.running \
            else 0
        try:
            sent = time.monotonic()
            batch = self.broker.wait_and_lease(
                self.worker_id, self.lease_seconds, free, self.timeout) if free else None
            if batch is None or dispatcher is None:
                return "woken" if self.broker.wait_for_work(self.timeout, self.also) \
                    else "away"
            if not self.lifecycle.running:
                # The worker began to stop while this wait was under way: what it leased
                # goes straight back, not into the hands of a worker on its way out.
                self._give_back(batch)
                return "woken"
            if len(batch.tasks) < free and self.due.note(batch.wait_seconds):
                self.inbox.nudge()  # ready is empty, and the loop must look sooner
            handed_over = dispatcher.start(self.broker.queue, batch, sent)
            if handed_over is None:  # the worker stopped since the check above
                self._give_back(batch)
                return "woken"
        except BrokerError:
            return "away"
        finally:
            self.slots.unreserve(free)
        if handed_over:
            self.runner.wait_taken(HANDOFF_SECONDS)
        return "again" if len(batch.tasks) < free else "woken"

    def _give_back(self, batch: LeaseBatch) -> None:
        """Release each task of `batch` to the front of ready, unstarted: the last leased
        first, so that they are back in the order they waited."""
        for task in reversed(batch.tasks):
            try:
                released = self.broker.release(task.task_id, task.token)
            except BrokerError as e:
                log.warning("task %s, leased as the worker stopped, could not be released "
                            "(it is reaped when its lease runs out): %s", task.task_id, e)
                continue
            log.info("task %s, leased as the worker stopped, %s", task.task_id,
                     {Released.RELEASED: "released", Released.CANCELLED: "ended cancelled "
                      "(its cancel had been requested)"}.get(released, "was no longer held"))
