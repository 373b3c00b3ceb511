"""The worker loop: promote, reap, lease, execute, ack/fail/release, wait."""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
import uuid

from taskq.app import App
from taskq.broker import Broker
from taskq.context import TaskContext
from taskq.errors import BrokerError
from taskq.results import LeaseBatch, LeasedTask
from taskq.settings import Settings
from taskq.worker.background import WaitOutcome, Waker
from taskq.worker.heartbeat import Heartbeat, LeaseCheck
from taskq.worker.lifecycle import Lifecycle
from taskq.worker.outage import Backoff, retry_for
from taskq.worker.runner import Outcome, Runner
from taskq.worker.settle import Settler, Stats

log = logging.getLogger("taskq.worker")

MAINTENANCE_LIMIT = 100
# Due tasks and expired leases are found within this long; a busy worker's loop turns
# thousands of times a second, and each turn need not ask. With a backlog in ready, a
# promoted task only joins the back of it, so looking less often costs it nothing.
MAINTENANCE_SECONDS = 0.02
MAINTENANCE_SECONDS_WITH_BACKLOG = 0.1
# How long the waker, having started tasks, stands aside for their handlers to start
# before it waits for work again (they start in well under a millisecond).
HANDOFF_SECONDS = 0.002
# Dead tasks age in days, so looking for expired ones now and then is plenty.
PURGE_EVERY_SECONDS = 10.0


class _Nudge:
    """An inbox message that only asks the loop to look around again."""


NUDGE = _Nudge()


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
        self.settings = settings or app.settings
        self.broker = broker or app.make_broker()
        self.concurrency = concurrency or self.settings.concurrency
        self.worker_id = worker_id or make_worker_id()
        self.stats = Stats()
        # Keyed by (task id, token): after a lost lease this worker may lease the same
        # task again while the stale run is still in hand, and both need heartbeats.
        self.in_flight: dict[tuple[str, int], TaskContext] = {}
        self._in_flight_lock = threading.Lock()
        self._inbox: queue.SimpleQueue[Outcome | _Nudge] = queue.SimpleQueue()
        self.lifecycle = Lifecycle(self.settings.shutdown_grace_seconds, self._nudge)
        self.runner = Runner(app, self.concurrency, self._inbox.put)
        self.heartbeat = Heartbeat(self.broker, self.settings.lease_seconds, self._contexts)
        self._lease_check = LeaseCheck(self.broker, self.settings.lease_seconds)
        # A blocking read must end well before the socket's read timeout does.
        block = max(0.05, min(self.settings.poll_seconds, self.settings.redis_timeout_seconds / 2))
        self.waker = Waker(self._wait_for_work, self._nudge, block)
        # Slots a lease in progress may fill, on the loop's or the waker's thread: each
        # reserves its free slots first, so together they never lease more than fit.
        self._reserved = 0
        self._backoff = Backoff()
        self._next_purge = 0.0
        self._last_maintenance = -1e9
        self._finished_outcomes: list[Outcome] = []
        self.settler = Settler(self.broker, self.settings, self.stats, self._forget,
                               self.worker_id)

    # -- the loop ----------------------------------------------------------------------

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
                    wait = self._maintain_and_lease()
                else:
                    self._settle_finished()
                    wait = None
                self._wait(wait)
            self._settle_finished()
        finally:
            self._abandon_in_hand()
            self.heartbeat.stop()
            self.waker.stop()
            self.runner.close()
            self.lifecycle.stopped()
            log.info("worker %s done: %s", self.worker_id, self.stats)
        return 0

    def stop(self, reason: str = "stop requested") -> None:
        """Drain and stop, as the first SIGTERM would."""
        self.lifecycle.request_stop(reason)

    def _finished(self) -> bool:
        if self.lifecycle.running:
            return False
        # A lease still under way on the waker's thread may yet put tasks in hand.
        idle = not self.in_flight and not self._reserved
        return idle or self.lifecycle.grace_expired()

    def _maintain_and_lease(self) -> float | None:
        """Settle finished handlers and fill the free slots (theirs included) in one round
        trip, then promote and reap (so no scheduler is needed); leasing first keeps
        maintenance off the path from a new task to its handler.

        Returns how long the loop may wait before looking again: None when every slot
        is busy (a finishing handler wakes it), else the broker's hint capped by the poll.
        """
        outcomes = self._take_finished()
        free = self._reserve(finishing=len(outcomes))
        try:
            sent = time.monotonic()
            batch = self.settler.settle(outcomes, free) if outcomes else None
            if batch is None and free > 0:
                sent = time.monotonic()
                batch = self.broker.lease_many(self.worker_id, self.settings.lease_seconds, free)
            if batch is not None:
                self._run_leased(batch, sent)
        except BrokerError as e:
            return self._backoff.failed(e)
        finally:
            self._unreserve(free)
        try:
            backlog = batch is not None and len(batch.tasks) == free
            promoted = self._maintain(MAINTENANCE_SECONDS_WITH_BACKLOG if backlog
                                      else MAINTENANCE_SECONDS)
        except BrokerError as e:
            return self._backoff.failed(e)
        self._backoff.succeeded()
        if batch is None:
            return self.settings.poll_seconds
        if len(batch.tasks) == free or promoted:
            return 0.0
        self.waker.arm()
        hint = batch.wait_seconds
        return self.settings.poll_seconds if hint is None else min(hint, self.settings.poll_seconds)

    def _maintain(self, interval: float) -> int:
        """Promote due tasks and reap expired leases, at most every `interval` seconds
        since a busy loop turns far more often; returns how many tasks became ready."""
        now = time.monotonic()
        if now < self._last_maintenance + interval:
            return 0
        self._last_maintenance = now
        promoted = len(self.broker.promote(MAINTENANCE_LIMIT))
        self.broker.reap(
            MAINTENANCE_LIMIT, self.settings.backoff_base_seconds, self.settings.backoff_max_seconds
        )
        if now >= self._next_purge:
            self.broker.purge(self.settings.dead_ttl_seconds, MAINTENANCE_LIMIT)
            self._next_purge = now + PURGE_EVERY_SECONDS
        return promoted

    def _reserve(self, finishing: int = 0) -> int:
        """Reserve every free slot for a lease about to be made, counting the slots of
        `finishing` handlers (done, still in hand until settled); returns how many."""
        with self._in_flight_lock:
            busy = len(self.in_flight) - finishing + self._reserved
            free = max(0, self.concurrency - busy)
            self._reserved += free
            return free

    def _unreserve(self, slots: int) -> None:
        """Give back a reservation once its leased tasks are in hand."""
        with self._in_flight_lock:
            self._reserved -= slots

    def _wait_for_work(self, timeout: float) -> WaitOutcome:
        """On the waker's thread: block until a producer signals work. On a single node
        the tasks that woke us are leased in the same round trip and started from here,
        sparing the first task a wait for the loop's thread and a second round trip; a
        lease that emptied ready leaves nothing for the loop to do, so we wait again."""
        free = self._reserve() if self.lifecycle.running else 0
        try:
            sent = time.monotonic()
            batch = self.broker.wait_and_lease(
                self.worker_id, self.settings.lease_seconds, free, timeout) if free else None
            if batch is None:
                return "woken" if self.broker.wait_for_work(timeout) else "away"
            handed_over = self._run_leased(batch, sent)
        except BrokerError:
            return "away"
        finally:
            self._unreserve(free)
        if handed_over:
            self.runner.wait_taken(HANDOFF_SECONDS)
        return "again" if len(batch.tasks) < free else "woken"

    def _run_leased(self, batch: LeaseBatch, sent_at: float) -> bool:
        """Put a batch leased by a call sent at monotonic `sent_at` in hand and hand it
        to the runner; True if any of it went to a handler (the rest failed at once:
        unknown task, bad payload)."""
        return bool(batch.tasks) and self.runner.submit(
            [self._start(t, sent_at) for t in batch.tasks])

    def _start(self, task: LeasedTask, sent_at: float) -> tuple[LeasedTask, TaskContext]:
        """Put a leased task in hand (so heartbeats cover it from now on)."""
        context = TaskContext(
            task_id=task.task_id,
            name=task.name,
            queue=self.broker.queue,
            worker_id=self.worker_id,
            token=task.token,
            attempt=task.attempt,
            max_retries=task.max_retries,
            lease=self._lease_check,
            confirmed_at=sent_at,
        )
        with self._in_flight_lock:
            self.in_flight[(task.task_id, task.token)] = context
        self.stats.leased += 1
        return task, context

    def _wait(self, seconds: float | None) -> None:
        """Sleep until a handler finishes, work arrives, a signal comes, or `seconds` pass."""
        if seconds == 0.0:
            return
        timeout = self.settings.poll_seconds if seconds is None else seconds
        if self.lifecycle.draining:
            timeout = min(timeout, max(0.01, self.lifecycle.drain_deadline - time.monotonic()))
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return
        if isinstance(message, Outcome):
            self._finished_outcomes.append(message)

    def _nudge(self) -> None:
        self._inbox.put(NUDGE)

    def _contexts(self) -> list[TaskContext]:
        with self._in_flight_lock:
            return list(self.in_flight.values())

    # -- finishing tasks ---------------------------------------------------------------

    def _settle_finished(self) -> None:
        """Settle every handler that has finished: all the acks in one round trip."""
        outcomes = self._take_finished()
        if outcomes:
            self.settler.settle(outcomes)

    def _take_finished(self) -> list[Outcome]:
        """The outcomes of every handler that has finished and is not yet settled."""
        outcomes, self._finished_outcomes = self._finished_outcomes, []
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                return outcomes
            if isinstance(message, Outcome):
                outcomes.append(message)

    def _forget(self, task: LeasedTask) -> None:
        with self._in_flight_lock:
            self.in_flight.pop((task.task_id, task.token), None)

    def _abandon_in_hand(self) -> None:
        """Settle tasks whose handlers outlived the grace period. Each is fenced first
        (waiting for an effect under way), so a handler that goes on cannot apply an
        effect afterwards. A task whose effect was applied is acked: run again, it
        would apply its effect twice wherever the effect is not guarded; the rest of
        its handler is cut off. Any other is released for another worker."""
        for context in self._contexts():
            if context.abandon():
                self._ack_abandoned(context)
            else:
                self._release_abandoned(context)
        with self._in_flight_lock:
            self.in_flight.clear()

    def _ack_abandoned(self, context: TaskContext) -> None:
        acked = retry_for(self.settings.lease_seconds, f"ack {context.task_id}",
                          lambda: self.broker.ack(context.task_id, context.token))
        log.warning("task %s outlived the grace period after its effect was applied: %s",
                    context.task_id, "acked, and the rest of its handler cut off" if acked
                    else "its ack was refused or lost (another worker may run it)")
        if acked:
            self.stats.acked += 1

    def _release_abandoned(self, context: TaskContext) -> None:
        released = retry_for(self.settings.lease_seconds, f"release {context.task_id}",
                             lambda: self.broker.release(context.task_id, context.token))
        log.warning("task %s abandoned at shutdown and %s", context.task_id,
                    "released" if released else "left to be reaped")
        if released:
            self.stats.released += 1

