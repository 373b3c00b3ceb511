"""The waker thread: while the worker is idle, it waits for work and leases it at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Literal

from taskq.broker import Broker
from taskq.errors import BrokerError
from taskq.settings import Settings
from taskq.worker.dispatch import Dispatcher
from taskq.worker.inbox import Inbox
from taskq.worker.lifecycle import Lifecycle
from taskq.worker.runner import Runner
from taskq.worker.slots import Slots

# How long the waker, having started tasks, stands aside for their handlers to start
# before it waits for work again (they start in well under a millisecond).
HANDOFF_SECONDS = 0.002
# The shortest blocking wait asked of Redis: BLPOP counts whole milliseconds, and a
# timeout that rounds to none would block for ever.
SHORTEST_WAIT_SECONDS = 0.002

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

    Promoting due tasks and reaping expired leases are the loop's, so the waker hands
    back to it when something is due: it never blocks past the moment the last lease
    (the loop's, given with `arm`, or its own) said the next delayed task or throttled
    start comes due or the next lease expires. Holding the free slots meanwhile, it
    would otherwise keep the loop from leasing what came due until its wait ended.

    All of `watched` are waited on in one call, so they must share a slot unless the
    transport `spans_slots`: on a cluster a worker on several queues has a waker per
    queue."""

    def __init__(self, watched: Sequence[Broker], settings: Settings, worker_id: str,
                 slots: Slots, dispatcher: Dispatcher | None, runner: Runner,
                 lifecycle: Lifecycle, inbox: Inbox, name: str = "taskq-waker") -> None:
        super().__init__(name=name, daemon=True)
        self.broker, self.also = watched[0], tuple(watched[1:])
        self.lease_seconds = settings.lease_seconds
        self.worker_id = worker_id
        self.slots = slots
        self.dispatcher = dispatcher
        self.runner = runner
        self.lifecycle = lifecycle
        self.inbox = inbox
        # A blocking read must end well before the socket's read timeout does.
        self.timeout = max(0.05, min(settings.poll_seconds, settings.redis_timeout_seconds / 2))
        self.armed = threading.Event()
        self.stopping = threading.Event()
        # When something comes due, as the last lease said (monotonic; None: nothing
        # known). Both threads write it, so under a lock.
        self._due_lock = threading.Lock()
        self._due_at: float | None = None

    def arm(self, due_in: float | None = None) -> None:
        """Wait for work, handing back to the loop in `due_in` seconds at the latest
        (its lease's hint) or when a lease of the waker's own says something is due."""
        if due_in is not None:
            # The sooner of the two: a moment already handled costs one early look.
            with self._due_lock:
                due_at = time.monotonic() + due_in
                self._due_at = due_at if self._due_at is None else min(self._due_at, due_at)
        self.armed.set()

    def _set_due(self, due_in: float | None) -> None:
        with self._due_lock:
            self._due_at = None if due_in is None else time.monotonic() + due_in

    def _due_in(self) -> float | None:
        with self._due_lock:
            return None if self._due_at is None else self._due_at - time.monotonic()

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
        due_in = self._due_in()
        if due_in is not None and due_in <= 0:
            self._set_due(None)
            return "woken"  # the loop promotes or reaps what came due, then leases it
        timeout = self.timeout if due_in is None else \
            max(SHORTEST_WAIT_SECONDS, min(self.timeout, due_in))
        dispatcher = self.dispatcher
        free = self.slots.reserve() if dispatcher is not None and self.lifecycle.running \
            else 0
        try:
            sent = time.monotonic()
            batch = self.broker.wait_and_lease(
                self.worker_id, self.lease_seconds, free, timeout) if free else None
            if batch is None or dispatcher is None:
                return "woken" if self.broker.wait_for_work(timeout, self.also) \
                    else "away"
            if len(batch.tasks) < free:
                # Ready is empty: the lease's hint is the newest word on what comes due.
                self._set_due(batch.wait_seconds)
            handed_over = dispatcher.start(self.broker.queue, batch, sent)
        except BrokerError:
            return "away"
        finally:
            self.slots.unreserve(free)
        if handed_over:
            self.runner.wait_taken(HANDOFF_SECONDS)
        return "again" if len(batch.tasks) < free else "woken"
