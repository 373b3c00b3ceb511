"""The heartbeat thread: every lease/3 seconds, renew every lease in hand in one call per
queue (the runs past their time limits are ended by `time_limits`)."""

from __future__ import annotations

import logging
import threading
import time

from taskq.broker import Broker
from taskq.context import TaskContext
from taskq.errors import BrokerError
from taskq.registry import Presence, register, unregister
from taskq.results import Renewal
from taskq.settings import Settings
from taskq.worker.queues import Queues
from taskq.worker.runner import Runner
from taskq.worker.slots import Slots

log = logging.getLogger("taskq.worker")

# How often a heartbeat running behind says so, at most (s).
BEHIND_WARN_SECONDS = 60.0


class Cadence:
    """When beats are due: every `interval` seconds counted from the first, so a slow
    beat does not push the ones after it back; a beat overdue by more than a whole
    interval is due at once, and the missed ones are not made up in a burst."""

    def __init__(self, interval: float, start: float) -> None:
        self.interval = interval
        self.due = start + interval

    def wait(self, now: float) -> float:
        """Seconds from `now` until the next beat is due (0 if it is due already)."""
        return max(0.0, self.due - now)

    def beaten(self, now: float) -> None:
        """A beat was made; the next is one interval after this one was due."""
        self.due = max(self.due + self.interval, now)


class LeaseCheck:
    """Confirms one lease with Redis, as a handler's `effect()` asks before it runs."""

    def __init__(self, broker: Broker, lease_seconds: float) -> None:
        self.broker = broker
        self.lease_seconds = lease_seconds

    def confirm(self, task_id: str, token: int) -> Renewal:
        return self.broker.heartbeat(task_id, token, self.lease_seconds)

    def progress(self, task_id: str, token: int, fraction: float, message: str) -> bool:
        return self.broker.progress(task_id, token, fraction, message)


class Heartbeat(threading.Thread):
    """Renews every lease in hand, draining included, in one script call per queue per
    beat (each lease on its own queue, with its own token).

    A renewal answered "stale" marks the task's context lost, which fences its effects;
    one answered "cancel" marks it cancelled, which fences them too, and has `runner`
    cancel an async handler; an outage is logged and tried again next beat: the lease
    survives two missed beats.
    A run timed out (see time_limits) is no longer renewed. The thread never waits on a
    lock a handler can hold, and no error ends it.
    """

    def __init__(self, queues: Queues, settings: Settings, slots: Slots,
                 runner: Runner | None = None, presence: Presence | None = None) -> None:
        super().__init__(name="taskq-heartbeat", daemon=True)
        self.queues = queues
        # What the worker says about itself in each queue's registry, every beat.
        self.presence = presence
        self.lease_seconds = settings.lease_seconds
        self.interval = settings.heartbeat_seconds
        self.slots = slots
        self.runner = runner
        self.stopping = threading.Event()
        # Queues whose registry the last try could not write: the worker is missing from
        # their workers view, and from the registry other workers decide by (rate-limit
        # lifts, DLQ retention), until a beat writes it again.
        self._unlisted: set[str] = set()
        # When (monotonic) the last beat started, and the last warning that beats ran late.
        self._last_beat: float | None = None
        self._warned_at = float("-inf")

    def run(self) -> None:
        """Beat until stopped; the worker announces itself before it starts this (and
        here again where that failed, not a beat later)."""
        if self._unlisted:
            self.announce()
        cadence = Cadence(self.interval, time.monotonic())
        while not self.stopping.wait(cadence.wait(time.monotonic())):
            if cadence.wait(time.monotonic()) > 0:  # woken early: not due yet
                continue
            self._note_gap(time.monotonic())
            try:
                self.beat()
            except Exception:
                log.exception("heartbeat failed; beating on")
            cadence.beaten(time.monotonic())
        self.withdraw()

    def _note_gap(self, now: float) -> None:
        """Say when beats come so far apart that a lease in hand is within a third of
        lapsing (a lease survives two missed beats, and then is reaped and run again)."""
        last, self._last_beat = self._last_beat, now
        gap = now - last if last is not None else 0.0
        if gap <= 2 * self.interval or now - self._warned_at < BEHIND_WARN_SECONDS:
            return
        self._warned_at = now
        log.warning("the heartbeat ran %.1fs after the last, its leases of %gs renewed every "
                    "%.1fs: a lease lapses, and its task runs again elsewhere, once beats "
                    "are a lease apart. The heartbeat waits for Python's GIL behind the "
                    "handler threads (many CPU-bound ones: run fewer per process, with "
                    "--processes) or for a slow Redis; a longer LEASE_SECONDS gives it room",
                    gap, self.lease_seconds, self.interval)

    def beat(self) -> None:
        """Renew every lease in hand that is neither lost, timed out nor settled, in one
        call per queue; a run timed out inside an effect() block keeps its lease until
        the block ends, and one kept to its end (a limited task's) until its handler
        returns, as each is failed only then."""
        contexts = [c for c in self.slots.in_hand()
                    if not (c.lease_lost or c.finished
                            or (c.timed_out and not (c.in_effect or c.kept_to_end)))]
        for queue, held in self.queues.by_queue(contexts, lambda c: c.queue).items():
            if held:
                self._renew(self.queues.broker(queue), held)
        self.announce()

    def announce(self) -> None:
        """Say in each queue's registry that this worker is alive, for a lease (see
        taskq.registry); a queue that cannot be reached is tried again next beat."""
        if self.presence is None:
            return
        in_hand = len(self.slots.in_hand())
        for broker in self.queues:
            try:
                register(broker, self.presence, in_hand, self.lease_seconds)
            except BrokerError as e:
                if broker.queue not in self._unlisted:
                    self._unlisted.add(broker.queue)
                    log.warning("registering on queue %r failed, so the queue's workers "
                                "view and the other workers do not see this one until a "
                                "beat succeeds (each beat tries again): %s", broker.queue, e)
                continue
            if broker.queue in self._unlisted:
                self._unlisted.discard(broker.queue)
                log.info("registered on queue %r again", broker.queue)

    def withdraw(self) -> None:
        """Leave each queue's registry at once (else the record expires a lease later)."""
        if self.presence is None:
            return
        for broker in self.queues:
            try:
                unregister(broker, self.presence.worker_id)
            except BrokerError as e:
                log.debug("leaving the registry of queue %r failed: %s", broker.queue, e)

    def _renew(self, broker: Broker, contexts: list[TaskContext]) -> None:
        """Renew the leases of `contexts`, tasks of `broker`'s queue, in one call; an
        outage is logged, and the next beat tries again."""
        sent = time.monotonic()
        try:
            held = broker.heartbeat_many([(c.task_id, c.token) for c in contexts],
                                         self.lease_seconds)
        except BrokerError as e:
            log.warning("heartbeat of %d lease(s) on queue %r failed, will retry: %s",
                        len(contexts), broker.queue, e)
            return
        for context, ok in zip(contexts, held, strict=True):
            if ok:
                context.renewed(sent)
                if ok == Renewal.CANCEL:
                    self.cancel(context)
            elif not context.finished:  # a settled task's lease ends by design
                log.warning("task %s lost its lease (token %d): another worker may run it",
                            context.task_id, context.token)
                context.mark_lost()

    def cancel(self, context: TaskContext) -> None:
        """Tell a run its task was cancelled: its effects are fenced at once; an async
        handler is cancelled (once, however many beats say so; the run may have learned
        of it first from an `effect()` check); a sync one sees
        `current_task().cancelled`."""
        if not context.cancelled:
            log.info("task %s: its cancel was requested; its effects are refused from now "
                     "on and it ends cancelled when its handler returns", context.task_id)
            context.cancel()
        if self.runner is not None:
            self.runner.cancel(context)

    def stop(self) -> None:
        self.stopping.set()
